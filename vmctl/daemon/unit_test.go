package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/process"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
)

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"": syscall.SIGKILL, "TERM": syscall.SIGTERM, "sigterm": syscall.SIGTERM, "SIGINT": syscall.SIGINT, "9": syscall.SIGKILL, "15": syscall.SIGTERM} {
		got, err := parseSignal(in)
		if err != nil || got != want {
			t.Errorf("parseSignal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "65", "TERMINATE", "-1", "KILL9"} {
		if _, err := parseSignal(in); err == nil {
			t.Errorf("parseSignal(%q) accepted", in)
		}
	}
}

func TestErrorFrom(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("x: %w", sandbox.ErrNotFound), 404, api.CodeNotFound},
		{fmt.Errorf("x: %w", sandbox.ErrNameTaken), 409, api.CodeNameTaken},
		{fmt.Errorf("x: %w", sandbox.ErrRunning), 409, api.CodeSandboxRunning},
		{errors.Join(sandbox.ErrNotRunning, sandbox.ErrGuestDied), 503, api.CodeGuestDied},
		{fmt.Errorf("x: %w", sandbox.ErrNotRunning), 409, api.CodeNotRunning},
		{fmt.Errorf("x: %w", process.ErrStdinClosed), 409, api.CodeStdinClosed},
		{&process.DroppedError{ID: "e1", Offset: 1, Dropped: 5}, 410, api.CodeOutputDropped},
		{&agentproto.Error{Code: agentproto.CodeNotFound, Message: "/x"}, 404, api.CodeNotFound},
		{&agentproto.Error{Code: agentproto.CodePermission, Message: "/x"}, 403, api.CodePermissionDenied},
		{&agentproto.Error{Code: agentproto.CodeIO, Message: "disk full"}, 500, api.CodeGuestError},
		{api.Errorf(429, api.CodeExecLimit, "limit"), 429, api.CodeExecLimit},
		{&agentproto.Error{Code: agentproto.CodeExists, Message: "/x"}, 409, api.CodeFileExists},
		{&agentproto.Error{Code: agentproto.CodeInvalid, Message: "/x"}, 422, api.CodeInvalidArgument},
		{fmt.Errorf("x: %w", process.ErrExited), 409, api.CodeProcessExited},
		{fmt.Errorf("x: %w", process.ErrTooMany), 429, api.CodeExecLimit},
		{fmt.Errorf("x: %w", sandbox.ErrBootTimeout), 500, api.CodeBootFailed},
		{fmt.Errorf("x: %w", sandbox.ErrConflict), 409, api.CodeConflict},
		{fmt.Errorf("x: %w", sandbox.ErrInvalid), 400, api.CodeInvalidArgument},
		{fmt.Errorf("x: %w: %w", libvirt.ErrUnavailable, libvirt.ErrClosed), 503, api.CodeUnavailable},
		{fmt.Errorf("x: %w", image.ErrInvalid), 422, api.CodeInvalidImage},
		{fmt.Errorf("x: %w", fs.ErrNotExist), 404, api.CodeNotFound},
		{fmt.Errorf("x: %w", context.Canceled), 503, api.CodeUnavailable},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), 503, api.CodeUnavailable},
		{errNotAFile, 422, api.CodeNotAFile},
		{errCapacity, 429, api.CodeCapacity},
		{errors.New("boom"), 500, api.CodeInternal},
	} {
		got := api.ErrorFrom(tc.err)
		if got.Status != tc.status || got.Code != tc.code {
			t.Errorf("ErrorFrom(%v) = %d %s; want %d %s", tc.err, got.Status, got.Code, tc.status, tc.code)
		}
	}
}

func TestMergeLimits(t *testing.T) {
	got := mergeLimits(api.Limits{TTLSeconds: 5}, api.Limits{TTLSeconds: 60, IdleTimeoutSeconds: 30, ExecTimeoutMs: 1000, MaxExecs: 7})
	want := api.Limits{TTLSeconds: 5, IdleTimeoutSeconds: 30, ExecTimeoutMs: 1000, MaxExecs: 7}
	if got != want {
		t.Fatalf("got %+v want %+v", got, want)
	}
}

func TestIsID(t *testing.T) {
	for in, want := range map[string]bool{"0123456789ab": true, "0123456789aB": false, "work1": false, "0123456789abc": false} {
		if isID(in) != want {
			t.Errorf("isID(%q) != %v", in, want)
		}
	}
}

func TestEventsOnePerChange(t *testing.T) {
	d := assemble(&core{boxes: map[string]*box{}, seen: map[string]string{}, events: newHub()})
	ch, cancel := d.events.subscribe()
	defer cancel()
	rec := func(state sandbox.State, reason string) sandbox.Record {
		return sandbox.Record{ID: "0123456789ab", Name: "w1", State: state, Reason: reason}
	}
	d.onChange(rec(sandbox.StateRunning, ""), false)
	d.onChange(rec(sandbox.StateRunning, ""), false) // counters only
	d.onChange(rec(sandbox.StateStopping, "removing"), false)
	d.onChange(rec(sandbox.StateStopping, "removing"), false)
	d.onChange(rec(sandbox.StateStopped, "removed"), true)
	var got []string
	for len(ch) > 0 {
		ev := <-ch
		got = append(got, ev.Type+" "+ev.State+" "+ev.Reason)
	}
	want := []string{"sandbox.created running ", "sandbox.state stopping removing", "sandbox.removed  "}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// TestUnexpectedPause: a pause of a job in progress (a snapshot, a save,
// a start) is no resource warning; QEMU's on a host I/O error, a
// watchdog's, an unknown one and a suspend ("user", checked against the
// sandbox's state by pausedBehindOurBack) may be.
func TestUnexpectedPause(t *testing.T) {
	for reason, want := range map[string]bool{"ioerror": true, "watchdog": true, "unknown": true, "": true, "crashed": true, "user": true,
		"snapshot": false, "save": false, "starting-up": false, "from-snapshot": false} {
		if got := unexpectedPause(resources.Usage{DomainState: "paused", PauseReason: reason}); got != want {
			t.Errorf("paused (%q): unexpected %v, want %v", reason, got, want)
		}
	}
	if unexpectedPause(resources.Usage{DomainState: "running"}) {
		t.Error("a running domain is an unexpected pause")
	}
}
