package guestagent_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
)

func TestReseed(t *testing.T) {
	var got [][]byte
	c, _ := newClientOpts(t, guestagent.Options{Reseed: func(e []byte) (bool, error) {
		got = append(got, bytes.Clone(e))
		return true, nil
	}})
	ctx := context.Background()
	for range 2 {
		resp, err := c.Reseed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if resp != (agentproto.ReseedResponse{CreditedBits: 512, Reseeded: true}) {
			t.Errorf("response %+v, want 512 bits credited and reseeded", resp)
		}
	}
	if len(got) != 2 || len(got[0]) != 64 || bytes.Equal(got[0], got[1]) || bytes.Equal(got[0], make([]byte, 64)) {
		t.Fatalf("entropy given to the guest: %x; want two different 64-byte random draws", got)
	}
}

func TestReseedErrors(t *testing.T) {
	c, _ := newClientOpts(t, guestagent.Options{Reseed: func([]byte) (bool, error) { return false, errors.New("no /dev/random") }})
	if _, err := c.Reseed(context.Background()); err == nil {
		t.Fatal("Reseed succeeded although the guest failed")
	}
	for _, n := range []int{0, agentproto.MinReseedBytes - 1, agentproto.MaxReseedBytes + 1} {
		r := agentproto.Request{Op: agentproto.OpReseed, Reseed: &agentproto.ReseedRequest{Entropy: make([]byte, n)}}
		var pe *agentproto.Error
		if err := r.Validate(); !errors.As(err, &pe) || pe.Code != agentproto.CodeInvalid {
			t.Errorf("%d bytes: Validate = %v, want invalid", n, err)
		}
	}
	if err := (&agentproto.Request{Op: agentproto.OpReseed}).Validate(); err == nil {
		t.Error("reseed without its arguments validated")
	}
}
