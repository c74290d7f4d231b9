package libvirt

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// TestReconnect kills a private libvirtd (never the host's) under a live
// Conn and starts it again: the watcher must keep delivering, calls made
// while the daemon is down must wait for it, and the domain, a separate
// QEMU process, must survive.
func TestReconnect(t *testing.T) {
	d, c, name, events := startWatchedDomain(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	d.kill()

	// While the daemon is down, a call with a short deadline fails with
	// ErrUnavailable (it may also be the call that discovers the drop).
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := c.DomainState(short, name)
	cancelShort()
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("DomainState while libvirtd is down: %v, want ErrUnavailable", err)
	}

	// A call with a longer deadline waits for the restart.
	type result struct {
		st  State
		err error
	}
	waiting := make(chan result, 1)
	go func() {
		st, err := c.DomainState(ctx, name)
		waiting <- result{st, err}
	}()

	d.start()

	r := <-waiting
	if r.err != nil || r.st != StateRunning {
		t.Fatalf("DomainState across restart = %q, %v; want running", r.st, r.err)
	}
	ret, err := c.MonitorCommand(ctx, name, []byte(`{"execute":"query-status"}`))
	if err != nil {
		t.Fatalf("query-status after restart: %v", err)
	}
	var status struct{ Status string }
	if err := json.Unmarshal(ret, &status); err != nil || status.Status != "running" {
		t.Errorf("query-status after restart: %s", ret)
	}

	// The watcher still delivers events from the new connection.
	if err := c.DestroyDomain(ctx, name); err != nil {
		t.Fatalf("DestroyDomain after restart: %v", err)
	}
	ev := waitEvent(t, events, EventStopped, 30*time.Second)
	if ev.Detail != "destroyed" || ev.Synthesized {
		t.Errorf("stop event after restart = %+v, want stopped/destroyed", ev)
	}
}

// TestReconnectVanished stops a domain while libvirtd is down: the
// watcher gets a synthesized stopped event after the reconnection.
func TestReconnectVanished(t *testing.T) {
	d, c, name, events := startWatchedDomain(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pid := d.qemuPID(t, name)

	d.kill()
	d.killQEMU(t, pid)
	d.start()

	ev := waitEvent(t, events, EventStopped, 60*time.Second)
	if ev.Synthesized {
		if ev.Detail != DetailVanished {
			t.Errorf("synthesized event %+v", ev)
		}
	} else {
		// libvirtd may itself notice the dead QEMU on startup and emit
		// the event after we re-subscribed.
		t.Logf("libvirt reported the stop itself: %+v", ev)
	}
	if _, err := c.DomainState(ctx, name); !errors.Is(err, ErrDomainNotFound) {
		t.Errorf("DomainState: %v, want ErrDomainNotFound", err)
	}
}

// startWatchedDomain starts a private libvirtd, connects to it, and starts
// a domain whose lifecycle events the returned channel delivers (the
// Started event already consumed).
func startWatchedDomain(t *testing.T) (*privateDaemon, *Conn, string, <-chan LifecycleEvent) {
	t.Helper()
	d := startPrivateDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	c, err := Connect(ctx, Config{Socket: d.socket, Logger: testLogger(t), MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() {
		assertNoTestDomains(t, c)
		_ = c.Close()
	})
	name := uniqueName()
	events, err := c.WatchLifecycle(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	createDomain(t, c, name, CreateOptions{})
	waitEvent(t, events, EventStarted, 30*time.Second)
	return d, c, name, events
}
