package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

func TestParseReply(t *testing.T) {
	ret, err := parseReply(`{"return":{"status":"running","running":true},"id":"libvirt-11"}`)
	if err != nil || string(ret) != `{"status":"running","running":true}` {
		t.Errorf("return reply: %s, %v", ret, err)
	}
	_, err = parseReply(`{"id":"libvirt-12","error":{"class":"CommandNotFound","desc":"The command bogus has not been found"}}`)
	var qerr *QMPError
	if !errors.As(err, &qerr) || qerr.Class != "CommandNotFound" || qerr.Desc != "The command bogus has not been found" {
		t.Errorf("error reply: %v", err)
	}
	if ret, err := parseReply(`{"id":"x"}`); err != nil || string(ret) != "{}" {
		t.Errorf("reply without return: %s, %v", ret, err)
	}
	if _, err := parseReply(`not json`); err == nil {
		t.Error("garbage reply accepted")
	}
}

func TestCommandName(t *testing.T) {
	if v, err := commandName([]byte(`{"execute":"query-status"}`)); err != nil || v != "query-status" {
		t.Errorf("got %q, %v", v, err)
	}
	for _, bad := range []string{`{}`, `[]`, `query-status`, ``} {
		if _, err := commandName([]byte(bad)); err == nil {
			t.Errorf("commandName(%q) accepted", bad)
		}
	}
}

func TestMapErr(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{golibvirt.Error{Code: uint32(golibvirt.ErrNoDomain), Message: "Domain not found"}, ErrDomainNotFound},
		{golibvirt.Error{Code: uint32(golibvirt.ErrDomExist), Message: "exists"}, ErrExists},
		{golibvirt.Error{Code: uint32(golibvirt.ErrOperationFailed), Message: "operation failed: domain 'x' already exists with uuid y"}, ErrExists},
		{golibvirt.Error{Code: uint32(golibvirt.ErrOperationInvalid), Message: "Requested operation is not valid: domain is not running"}, ErrNotRunning},
		{golibvirt.Error{Code: uint32(golibvirt.ErrAgentUnresponsive), Message: "agent"}, ErrAgentUnavailable},
		{golibvirt.ErrInterrupted, ErrUnavailable},
		{syscall.EINVAL, ErrUnavailable},
		{fmt.Errorf("read: %w", io.EOF), ErrUnavailable},
	} {
		got := mapErr("op", tc.err)
		if !errors.Is(got, tc.want) {
			t.Errorf("mapErr(%v) = %v, want %v", tc.err, got, tc.want)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("mapErr(%v) lost the original error", tc.err)
		}
	}
	plain := golibvirt.Error{Code: uint32(golibvirt.ErrInternalError), Message: "boom"}
	got := mapErr("op", plain)
	for _, s := range []error{ErrDomainNotFound, ErrExists, ErrUnavailable, ErrNotRunning} {
		if errors.Is(got, s) {
			t.Errorf("internal error mapped to %v", s)
		}
	}
	if mapErr("op", nil) != nil {
		t.Error("mapErr(nil) != nil")
	}
}

func TestEventFromMsg(t *testing.T) {
	var uuid golibvirt.UUID
	for i := range uuid {
		uuid[i] = byte(i)
	}
	dom := golibvirt.Domain{Name: "d", UUID: uuid}
	for _, tc := range []struct {
		event, detail int32
		kind          EventKind
		want          string
	}{
		{int32(golibvirt.DomainEventStarted), int32(golibvirt.DomainEventStartedBooted), EventStarted, "booted"},
		{int32(golibvirt.DomainEventStopped), int32(golibvirt.DomainEventStoppedDestroyed), EventStopped, "destroyed"},
		{int32(golibvirt.DomainEventStopped), int32(golibvirt.DomainEventStoppedShutdown), EventStopped, "shutdown"},
		{int32(golibvirt.DomainEventStopped), int32(golibvirt.DomainEventStoppedCrashed), EventStopped, "crashed"},
		{int32(golibvirt.DomainEventStopped), int32(golibvirt.DomainEventStoppedFailed), EventStopped, "failed"},
		{int32(golibvirt.DomainEventSuspended), int32(golibvirt.DomainEventSuspendedPaused), EventSuspended, "paused"},
		{int32(golibvirt.DomainEventResumed), int32(golibvirt.DomainEventResumedUnpaused), EventResumed, "unpaused"},
		{int32(golibvirt.DomainEventShutdown), int32(golibvirt.DomainEventShutdownGuest), EventShutdown, "guest"},
		{int32(golibvirt.DomainEventCrashed), int32(golibvirt.DomainEventCrashedPanicked), EventCrashed, "panicked"},
		{int32(golibvirt.DomainEventPmsuspended), int32(golibvirt.DomainEventPmsuspendedMemory), EventPMSuspended, "memory"},
		{int32(golibvirt.DomainEventStopped), 99, EventStopped, "detail-99"},
		{42, 0, EventKind("event-42"), "detail-0"},
	} {
		ev := eventFromMsg(golibvirt.DomainEventLifecycleMsg{Dom: dom, Event: tc.event, Detail: tc.detail})
		if ev.Kind != tc.kind || ev.Detail != tc.want || ev.Domain != "d" {
			t.Errorf("event %d/%d = %+v, want %s/%s", tc.event, tc.detail, ev, tc.kind, tc.want)
		}
		if ev.UUID != "00010203-0405-0607-0809-0a0b0c0d0e0f" {
			t.Errorf("uuid %s", ev.UUID)
		}
	}
}

func TestResolve(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	for _, tc := range []struct {
		cfg        Config
		uri, sock  string
		shouldFail bool
	}{
		{cfg: Config{}, uri: "qemu:///system", sock: SystemSocket},
		{cfg: Config{URI: "qemu:///system"}, uri: "qemu:///system", sock: SystemSocket},
		{cfg: Config{URI: "qemu+unix:///system"}, uri: "qemu:///system", sock: SystemSocket},
		{cfg: Config{URI: "qemu:///session"}, uri: "qemu:///session", sock: "/run/user/1000/libvirt/libvirt-sock"},
		{cfg: Config{URI: "qemu:///system?socket=/tmp/s"}, uri: "qemu:///system", sock: "/tmp/s"},
		{cfg: Config{URI: "qemu:///system?socket=/tmp/s", Socket: "/tmp/o"}, uri: "qemu:///system", sock: "/tmp/o"},
		{cfg: Config{URI: "qemu+ssh://host/system"}, shouldFail: true},
		{cfg: Config{URI: "qemu://host/system"}, shouldFail: true},
		{cfg: Config{URI: "xen:///system"}, shouldFail: true},
		{cfg: Config{URI: "qemu:///embed"}, shouldFail: true},
	} {
		ep, err := resolve(tc.cfg)
		if tc.shouldFail {
			if err == nil {
				t.Errorf("resolve(%+v) accepted", tc.cfg)
			}
			continue
		}
		if err != nil || ep.uri != tc.uri || ep.socket != tc.sock {
			t.Errorf("resolve(%+v) = %+v, %v; want %s via %s", tc.cfg, ep, err, tc.uri, tc.sock)
		}
	}
}

// disconnectedConn is a Conn that never had a connection: enough to test
// waiting and fan-out without libvirtd.
func disconnectedConn() *Conn {
	return &Conn{
		cfg:      Config{DialTimeout: time.Second},
		log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		done:     make(chan struct{}),
		ready:    make(chan struct{}),
		watchers: make(map[string]map[*watcher]struct{}),
	}
}

func TestCallWhileDisconnectedWaitsForContext(t *testing.T) {
	c := disconnectedConn()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.DomainState(ctx, "x")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("DomainState while disconnected: %v", err)
	}
}

func TestFanOut(t *testing.T) {
	c := disconnectedConn()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a1, err := c.WatchLifecycle(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := c.WatchLifecycle(ctx, "a")
	b, _ := c.WatchLifecycle(ctx, "b")

	// Many events without anyone reading: dispatch must never block.
	for i := range 100 {
		c.dispatch(LifecycleEvent{Domain: "a", Kind: EventStarted, Detail: fmt.Sprint(i)})
	}
	c.dispatch(LifecycleEvent{Domain: "b", Kind: EventStopped, Detail: "destroyed"})

	for _, ch := range []<-chan LifecycleEvent{a1, a2} {
		for i := range 100 {
			ev := nextEvent(t, ch, 5*time.Second)
			if ev.Domain != "a" || ev.Detail != fmt.Sprint(i) {
				t.Fatalf("event %d = %+v", i, ev)
			}
		}
	}
	if ev := nextEvent(t, b, 5*time.Second); ev.Domain != "b" || ev.Kind != EventStopped {
		t.Errorf("b got %+v", ev)
	}

	// The synthesized stop goes only to watchers that saw the domain alive.
	c.dispatchVanished("a")
	if ev := nextEvent(t, a1, 5*time.Second); !ev.Synthesized || ev.Detail != DetailVanished {
		t.Errorf("vanished event %+v", ev)
	}
	c.dispatchVanished("b") // b already stopped: nothing
	c.dispatch(LifecycleEvent{Domain: "b", Kind: EventStarted, Detail: "booted"})
	if ev := nextEvent(t, b, 5*time.Second); ev.Kind != EventStarted {
		t.Errorf("b got %+v after a vanished check on a stopped domain", ev)
	}

	cancel()
	for _, ch := range []<-chan LifecycleEvent{a1, a2, b} {
		for range ch { // drain until closed
		}
	}
	c.watchMu.Lock()
	n := len(c.watchers)
	c.watchMu.Unlock()
	if n != 0 {
		t.Errorf("%d watcher sets left after cancel", n)
	}
}
