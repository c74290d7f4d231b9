package guestagent_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
)

func TestConfigureNetworkOp(t *testing.T) {
	var got []agentproto.NetworkRequest
	c, _ := newClientOpts(t, guestagent.Options{ConfigureNetwork: func(r agentproto.NetworkRequest) error {
		got = append(got, r)
		return nil
	}})
	ctx := context.Background()
	want := agentproto.NetworkRequest{Address: "10.213.0.2/30", Gateway: "10.213.0.1", DNS: "10.213.0.1", MAC: "02:ab:01:23:45:67"}
	if err := c.ConfigureNetwork(ctx, want); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("the guest configured %+v, want %+v", got, want)
	}
	// A malformed request never reaches the guest's configuration.
	var pe *agentproto.Error
	if err := c.ConfigureNetwork(ctx, agentproto.NetworkRequest{Address: "10.213.0.2"}); !errors.As(err, &pe) || pe.Code != agentproto.CodeInvalid {
		t.Fatalf("bad address: %v, want CodeInvalid", err)
	}
	if len(got) != 1 {
		t.Fatalf("a bad request was configured: %+v", got)
	}

	// An agent that is not the guest's init does not touch the network.
	c2, _ := newClientOpts(t, guestagent.Options{})
	if err := c2.ConfigureNetwork(ctx, want); !errors.As(err, &pe) || pe.Code != agentproto.CodeUnsupported {
		t.Fatalf("without ConfigureNetwork: %v, want CodeUnsupported", err)
	}
}
