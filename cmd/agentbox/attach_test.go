package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/apiserver/apitest"
)

var _ apiserver.ProcessTerminalBackend = (*fakeBackend)(nil)

// ResizeProcess implements apiserver.ProcessTerminalBackend on the fake:
// a process without a terminal is refused as the daemon refuses it.
func (b *fakeBackend) ResizeProcess(ctx context.Context, ref, pid string, size api.TtySize) (api.Process, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, err := b.proc(ref, pid)
	if err != nil {
		return api.Process{}, err
	}
	if p.p.Tty == nil {
		return api.Process{}, api.Invalidf("process %s: process has no terminal", pid)
	}
	p.p.Tty = &size
	return p.p, nil
}

// AttachProcess implements apiserver.ProcessTerminalBackend on the fake
// through its ProcessOutput (from the offset, default 0) and WriteStdin.
func (b *fakeBackend) AttachProcess(ctx context.Context, ref, pid string, at apiserver.ProcessAttachment) (api.ExitStatus, error) {
	p, err := b.GetProcess(ctx, ref, pid)
	if err != nil {
		return api.ExitStatus{}, err
	}
	var offset int64
	if at.Offset != nil {
		offset = *at.Offset
	}
	at.Started(&apitest.Control{ID: pid, PID: p.Pid, Tty: p.Tty != nil}, p, offset)
	b.mu.Lock()
	if b.attached != nil {
		close(b.attached)
		b.attached = nil
	}
	b.mu.Unlock()
	if at.Stdin != nil {
		go b.WriteStdin(ctx, ref, pid, at.Stdin, false)
	}
	var st api.ExitStatus
	err = b.ProcessOutput(ctx, ref, pid, offset, true, func(ev api.ExecEvent) error {
		switch ev.Type {
		case api.EventStdout:
			_, err := at.Stdout.Write(ev.Data)
			return err
		case api.EventStderr:
			_, err := at.Stderr.Write(ev.Data)
			return err
		case api.EventExit:
			st = *ev.Exit
		}
		return nil
	})
	return st, err
}

func TestCLIAttach(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "create", "--image", "/img", "--name", "w1").check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "exec", "-d", "w1", "--", "out", "hello\n", "oops\n", "4").check(t, 0, "p1\n", "")
	// Its output from offset 2, then its exit status.
	d.cli(t, nil, "attach", "--offset", "2", "w1", "p1").check(t, 4, "llo\n", "oops\n")
	d.cli(t, nil, "attach", "w1", "p9").check(t, 125, "", "agentbox: no process \"p9\" in sandbox 000000abc001\n")
	d.cli(t, nil, "attach", "--offset", "-1", "w1", "p1").check(t, 125, "", "agentbox: --offset -1: must be 0 or more\n")
	d.cli(t, nil, "attach", "-it", "w1", "p1").check(t, 125, "", "agentbox: -t needs a terminal on stdin: run it from one, or drop -t to pipe stdin (-i)\n")
	d.cli(t, nil, "attach", "w1").check(t, 125, "", "agentbox: want 2 argument(s), got 1: usage: agentbox attach [-i] [-t] [--offset N] SANDBOX PROCESS\n")
}

func TestDetachKeys(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		detached       bool
	}{
		{"plain", "ls -l\r", "ls -l\r", false},
		{"ctrl-p ctrl-q", "ab\x10\x11cd", "ab", true},
		{"ctrl-p then another key", "a\x10b\x10\x10\x11", "a\x10b\x10", true},
		{"a lone ctrl-p at the end is held", "x\x10", "x", false},
		{"ctrl-q alone", "\x11q", "\x11q", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, oneByte := range []bool{false, true} {
				detached := false
				var r io.Reader = strings.NewReader(c.in)
				if oneByte {
					r = iotest.OneByteReader(r)
				}
				got, err := io.ReadAll(&detachKeys{r: r, detach: func() { detached = true }})
				if err != nil || !bytes.Equal(got, []byte(c.want)) || detached != c.detached {
					t.Fatalf("one byte %v: got %q, %v, detached %v; want %q, detached %v", oneByte, got, err, detached, c.want, c.detached)
				}
			}
		})
	}
}
