package libvirt

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"
)

func TestDomainLifecycle(t *testing.T) {
	c := connectSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := uniqueName()

	events, err := c.WatchLifecycle(ctx, name)
	if err != nil {
		t.Fatalf("WatchLifecycle: %v", err)
	}
	info := createDomain(t, c, name, CreateOptions{})
	if info.Name != name || info.State != StateRunning || info.SandboxID != "sb-"+name || info.UUID == "" {
		t.Errorf("CreateDomain returned %+v", info)
	}

	// libvirt starts QEMU paused and then resumes it, so "resumed" may
	// come before "started".
	ev := waitEvent(t, events, EventStarted, 30*time.Second)
	if ev.Detail != "booted" || ev.Domain != name || ev.UUID != info.UUID {
		t.Errorf("first event = %+v, want started/booted", ev)
	}

	st, err := c.DomainState(ctx, name)
	if err != nil || st != StateRunning {
		t.Errorf("DomainState = %q, %v; want running", st, err)
	}

	doms, err := c.ListDomains(ctx)
	if err != nil {
		t.Fatalf("ListDomains: %v", err)
	}
	found := false
	for _, d := range doms {
		if d.Name == name {
			found = true
			if d.SandboxID != "sb-"+name || d.Image != "none" || d.State != StateRunning {
				t.Errorf("ListDomains entry %+v", d)
			}
		}
	}
	if !found {
		t.Errorf("ListDomains does not list %s", name)
	}

	// QMP: a good command returns the "return" member ...
	ret, err := c.MonitorCommand(ctx, name, []byte(`{"execute":"query-status"}`))
	if err != nil {
		t.Fatalf("query-status: %v", err)
	}
	var status struct {
		Status  string `json:"status"`
		Running bool   `json:"running"`
	}
	if err := json.Unmarshal(ret, &status); err != nil || status.Status != "running" || !status.Running {
		t.Errorf("query-status returned %s (%v)", ret, err)
	}
	// ... and an unknown one a *QMPError, although libvirt reports success.
	_, err = c.MonitorCommand(ctx, name, []byte(`{"execute":"agentbox-no-such-command"}`))
	var qerr *QMPError
	if !errors.As(err, &qerr) || qerr.Class != "CommandNotFound" {
		t.Errorf("unknown QMP command: err = %v, want *QMPError CommandNotFound", err)
	}

	if err := c.DestroyDomain(ctx, name); err != nil {
		t.Fatalf("DestroyDomain: %v", err)
	}
	ev = waitEvent(t, events, EventStopped, 30*time.Second)
	if ev.Detail != "destroyed" || ev.Synthesized {
		t.Errorf("stop event = %+v, want stopped/destroyed", ev)
	}

	if _, err := c.DomainState(ctx, name); !errors.Is(err, ErrDomainNotFound) {
		t.Errorf("DomainState after destroy: %v, want ErrDomainNotFound", err)
	}
	doms, err = c.ListDomains(ctx)
	if err != nil {
		t.Fatalf("ListDomains: %v", err)
	}
	for _, d := range doms {
		if d.Name == name {
			t.Errorf("ListDomains still lists %s after destroy", name)
		}
	}
	if err := c.DestroyDomain(ctx, name); err != nil {
		t.Errorf("second DestroyDomain: %v, want nil", err)
	}
	if _, err := c.MonitorCommand(ctx, name, []byte(`{"execute":"query-status"}`)); !errors.Is(err, ErrDomainNotFound) {
		t.Errorf("MonitorCommand on missing domain: %v, want ErrDomainNotFound", err)
	}
}

func TestDestroyMissingDomain(t *testing.T) {
	c := connectSystem(t)
	if err := c.DestroyDomain(context.Background(), uniqueName()); err != nil {
		t.Errorf("DestroyDomain of a missing domain: %v, want nil", err)
	}
}

func TestCreateDuplicateName(t *testing.T) {
	c := connectSystem(t)
	name := uniqueName()
	createDomain(t, c, name, CreateOptions{})
	_, err := c.CreateDomain(context.Background(), biosDomainXML(name, "other"), CreateOptions{})
	if !errors.Is(err, ErrExists) {
		t.Errorf("second CreateDomain: %v, want ErrExists", err)
	}
	t.Logf("duplicate name: %v", err)
}

func TestCreatePausedAndResume(t *testing.T) {
	c := connectSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := uniqueName()
	events, err := c.WatchLifecycle(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info := createDomain(t, c, name, CreateOptions{Paused: true})
	if info.State != StatePaused {
		t.Errorf("state after paused create = %s", info.State)
	}
	waitEvent(t, events, EventSuspended, 30*time.Second)
	if _, err := c.MonitorCommand(ctx, name, []byte(`{"execute":"cont"}`)); err != nil {
		t.Fatalf("cont: %v", err)
	}
	ev := waitEvent(t, events, EventResumed, 30*time.Second)
	if ev.Detail != "unpaused" {
		t.Errorf("resume event %+v", ev)
	}
}

func TestDomainPID(t *testing.T) {
	c := connectSystem(t)
	name := uniqueName()
	createDomain(t, c, name, CreateOptions{})
	pid, err := c.DomainPID(context.Background(), name)
	if err != nil {
		t.Fatalf("DomainPID: %v", err)
	}
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		t.Fatalf("pid %d: %v", pid, err)
	}
	if got := string(comm); got != "qemu-system-x86\n" {
		t.Errorf("pid %d is %q, want qemu-system-x86", pid, got)
	}
	if _, err := c.DomainPID(context.Background(), uniqueName()); !errors.Is(err, ErrDomainNotFound) {
		t.Errorf("DomainPID of a missing domain: %v", err)
	}
}

func TestAgentCommandWithoutAgent(t *testing.T) {
	c := connectSystem(t)
	name := uniqueName()
	createDomain(t, c, name, CreateOptions{})
	_, err := c.AgentCommand(context.Background(), name, []byte(`{"execute":"guest-ping"}`), time.Second)
	if !errors.Is(err, ErrAgentUnavailable) {
		t.Fatalf("guest-ping on a domain without a guest agent channel: %v, want ErrAgentUnavailable", err)
	}
	t.Logf("guest-ping without agent: %v", err)
}

func TestWatchClosesWithContext(t *testing.T) {
	c := connectSystem(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := c.WatchLifecycle(ctx, uniqueName())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("event on a cancelled watch")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch channel not closed after cancel")
	}
}

func TestCallsAfterClose(t *testing.T) {
	c := connectSystem(t)
	c2, err := Connect(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c2.WatchLifecycle(context.Background(), uniqueName())
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch; ok {
		t.Error("watch channel delivered after Close")
	}
	_, err = c2.DomainState(context.Background(), "x")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrClosed) {
		t.Errorf("DomainState after Close: %v", err)
	}
	if err := c2.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_ = c
}

// TestCreateAutoDestroy: a domain created with AutoDestroy dies with the
// connection that made it; another connection sees it gone.
func TestCreateAutoDestroy(t *testing.T) {
	watcher := connectSystem(t) // skips without libvirtd
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Connect(ctx, Config{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := uniqueName()
	events, err := watcher.WatchLifecycle(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateDomain(ctx, biosDomainXML(name, "sb-"+name), CreateOptions{AutoDestroy: true}); err != nil {
		t.Fatalf("CreateDomain: %v", err)
	}
	if st, err := watcher.DomainState(ctx, name); err != nil || st != StateRunning {
		t.Fatalf("state %q, %v; want running", st, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, events, EventStopped, 30*time.Second)
	if ev.Detail != "destroyed" {
		t.Errorf("stop event %+v, want destroyed", ev)
	}
	if err := watcher.DestroyDomain(ctx, name); err != nil {
		t.Errorf("DestroyDomain after autodestroy: %v", err)
	}
}
