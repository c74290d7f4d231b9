package procs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent/procs"
)

// fake is a scripted command: its script runs in a goroutine with the
// streams Start was given, and Wait returns what the script returned.
type fake struct {
	pid            int
	ctx            context.Context
	req            agentproto.ExecRequest
	stdin          io.Reader
	stdout, stderr io.Writer
	sigs           chan syscall.Signal
	done           chan struct{}
	st             agentproto.ExitStatus
	err            error
}

type script func(f *fake) (agentproto.ExitStatus, error)

func (f *fake) Pid() int { return f.pid }

func (f *fake) Signal(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-f.done:
		return agentproto.ErrProcExited
	default:
	}
	select {
	case f.sigs <- sig:
		return nil
	case <-f.done:
		return agentproto.ErrProcExited
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fake) Wait() (agentproto.ExitStatus, error) {
	<-f.done
	return f.st, f.err
}

// out writes s to stream ("stdout" or "stderr").
func (f *fake) out(stream, s string) {
	w := f.stdout
	if stream == procs.StreamStderr {
		w = f.stderr
	}
	if _, err := io.WriteString(w, s); err != nil {
		panic(err)
	}
}

// untilSignal waits for a signal (exit by it) or the lifetime ctx's end
// (SIGKILL, as the agent does).
func (f *fake) untilSignal() (agentproto.ExitStatus, error) {
	select {
	case s := <-f.sigs:
		return agentproto.ExitStatus{Code: -1, Signal: int(s)}, nil
	case <-f.ctx.Done():
		return agentproto.ExitStatus{Code: -1, Signal: int(syscall.SIGKILL)}, f.ctx.Err()
	}
}

var nextPid atomic.Int64

// starter returns a StartFunc running s; each started fake is also sent
// on started when it is not nil.
func starter(s script, started chan<- *fake) procs.StartFunc {
	return func(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (procs.Proc, error) {
		f := &fake{
			pid: int(1000 + nextPid.Add(1)), ctx: ctx, req: req, stdin: stdin,
			stdout: stdout, stderr: stderr,
			sigs: make(chan syscall.Signal, 1), done: make(chan struct{}),
		}
		go func() {
			f.st, f.err = s(f)
			close(f.done)
		}()
		if started != nil {
			started <- f
		}
		return f, nil
	}
}

func exit(code int) (agentproto.ExitStatus, error) { return agentproto.ExitStatus{Code: code}, nil }

func argv(a ...string) agentproto.ExecRequest { return agentproto.ExecRequest{Argv: a} }

// collect reads id's output from offset; the chunks' Data are copied.
func collect(t *testing.T, tb *procs.Table, ctx context.Context, id string, offset int64, follow bool) ([]procs.Chunk, agentproto.ProcInfo, error) {
	t.Helper()
	var got []procs.Chunk
	info, err := tb.Output(ctx, id, offset, follow, func(c procs.Chunk) error {
		c.Data = bytes.Clone(c.Data)
		got = append(got, c)
		return nil
	})
	return got, info, err
}

// until follows id's output until the combined output from offset 0
// contains want.
func until(t *testing.T, tb *procs.Table, id, want string) {
	t.Helper()
	errFound := errors.New("found")
	var all []byte
	_, err := tb.Output(context.Background(), id, 0, true, func(c procs.Chunk) error {
		all = append(all, c.Data...)
		if bytes.Contains(all, []byte(want)) {
			return errFound
		}
		return nil
	})
	if err != errFound {
		t.Fatalf("output %q ended without %q: %v", all, want, err)
	}
}

func wait(t *testing.T, tb *procs.Table, id string) agentproto.ProcInfo {
	t.Helper()
	info, err := tb.Wait(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// exits records OnExit calls.
type exits struct {
	mu    sync.Mutex
	calls map[string][]agentproto.ProcInfo
}

func (x *exits) record(in agentproto.ProcInfo) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.calls == nil {
		x.calls = map[string][]agentproto.ProcInfo{}
	}
	x.calls[in.ID] = append(x.calls[in.ID], in)
}

func (x *exits) get(id string) []agentproto.ProcInfo {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.calls[id]
}

// errDisconnected stands for a transport failure that leaves a command's
// fate unknown (the host's agent.ErrDisconnected).
var errDisconnected = errors.New("agent: disconnected from guest agent")
