package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// TestWatch: ready comes before the events, which arrive in order; the
// ERROR event and an error before the start are *api.Error.
func TestWatch(t *testing.T) {
	c := start(t, &backendtest.Fake{})
	var got []string
	ready := false
	err := c.Watch(context.Background(), "work1", "/work", true, func() { ready = true }, func(ev api.WatchEvent) error {
		if !ready {
			t.Fatal("event before ready")
		}
		got = append(got, ev.Op+" "+ev.Path+" "+ev.To)
		return nil
	})
	want := []string{"CREATE /work/a.txt ", "RENAME /work/a.txt /work/b.txt", "OVERFLOW /work ", "REMOVE /work "}
	if err != nil || len(got) != len(want) {
		t.Fatalf("Watch: %v, events %q", err, got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %q, want %q", got, want)
		}
	}

	b := &backendtest.Fake{WatchFn: func(_ context.Context, _, _ string, _ bool, ready func() error, _ func(api.WatchEvent) error) error {
		if err := ready(); err != nil {
			return err
		}
		return api.Errorf(409, api.CodeNotRunning, "sandbox stopped")
	}}
	c = start(t, b)
	err = c.Watch(context.Background(), "work1", "/work", false, nil, func(api.WatchEvent) error { return nil })
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeNotRunning || ae.Status != 409 {
		t.Fatalf("error after start: %v", err)
	}

	b = &backendtest.Fake{WatchFn: func(context.Context, string, string, bool, func() error, func(api.WatchEvent) error) error {
		return api.Errorf(404, api.CodeNotFound, "watch /nope: no such file or directory")
	}}
	c = start(t, b)
	err = c.Watch(context.Background(), "work1", "/nope", false, func() { t.Fatal("ready on an error") }, func(api.WatchEvent) error { return nil })
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || ae.Message != "watch /nope: no such file or directory" {
		t.Fatalf("error before start: %v", err)
	}
}
