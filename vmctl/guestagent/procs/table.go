package procs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// Defaults of Options.
const (
	// DefaultBufferBytes is the output kept per process: 8 MiB.
	DefaultBufferBytes = 8 << 20
	// DefaultMaxProcesses is how many processes a table keeps, running
	// and ended ones together.
	DefaultMaxProcesses = 256
)

// KillTimeout bounds each SIGKILL that CloseAll sends to a running
// command.
const KillTimeout = 2 * time.Second

// Proc is a started command.
type Proc interface {
	// Pid is the guest process id (also its process group id); 0 if the
	// command did not start.
	Pid() int
	// Signal sends sig to the command's process group. An error wrapping
	// agentproto.ErrProcExited means the command already ended.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Wait blocks until the command ended and returns its status. It
	// must return only after every output byte was written to the
	// writers given at start. An error with a status that says how the
	// command ended (Code >= 0, a Signal, or an ErrorKind) still counts
	// as an end; any other error (a transport failure, no status within
	// the kill grace) makes the process "lost".
	Wait() (agentproto.ExitStatus, error)
}

// Terminal is a Proc that runs on a pseudo-terminal (started with
// ExecRequest.Tty): its size can change.
type Terminal interface {
	Proc
	// Resize sets the terminal's window size. An error wrapping
	// agentproto.ErrProcExited means the command already ended.
	Resize(size agentproto.TtySize) error
}

// StartFunc starts req with stdin as the command's stdin (nil: /dev/null)
// and its output copied to stdout and stderr, and returns once the command
// runs or failed to start (its Wait then reports how). ctx bounds the
// command's whole life: when ctx ends the command is killed. It has the
// shape of agent.Client.Start; the guest agent starts local commands.
type StartFunc func(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (Proc, error)

// Options configures a Table. The zero value is usable.
type Options struct {
	// BufferBytes is how many bytes of output (stdout and stderr
	// together) a process keeps; older bytes are dropped. 0 means
	// DefaultBufferBytes (8 MiB).
	BufferBytes int
	// MaxProcesses is how many processes the table keeps, ended ones
	// included. To start one more, the oldest ended process is forgotten;
	// when all of them still run, Start fails with
	// agentproto.ErrProcLimit. 0 means DefaultMaxProcesses (256).
	MaxProcesses int
	// OnExit, if set, is called once per process when it ends (exited or
	// lost), with its final ProcInfo, from the goroutine that saw the end
	// (the table's waiter, or one of CloseAll's), so calls for different
	// processes may run concurrently and it must be safe for that. It
	// runs without the table's locks held and may call the table; it
	// should not block long.
	OnExit func(agentproto.ProcInfo)
}

// Table holds the detached processes of one sandbox: their state, a
// bounded buffer of their combined output and their stdin. It is safe for
// concurrent use.
//
// Its snapshots of a process are agentproto.ProcInfo, the protocol's own
// form, which the agent answers as it is: the guest has no other view of
// a process, so it needs no type of its own (times are the guest's clock
// readings in nanoseconds, ProcInfo.StartedNs and EndedNs; states are
// agentproto.ProcRunning, ProcExited and ProcLost). The host's view is
// vmctl/process.Info, which says why it is another type.
type Table struct {
	opts Options

	mu      sync.Mutex
	procs   map[string]*entry
	order   []*entry        // the entries of procs, oldest first
	pending map[string]bool // ids whose StartFunc runs
	closed  bool

	waiters sync.WaitGroup // goroutines waiting for commands' ends
}

// NewTable returns an empty table; see Options for the defaults.
func NewTable(opts Options) *Table {
	if opts.BufferBytes <= 0 {
		opts.BufferBytes = DefaultBufferBytes
	}
	if opts.MaxProcesses <= 0 {
		opts.MaxProcesses = DefaultMaxProcesses
	}
	return &Table{opts: opts, procs: map[string]*entry{}, pending: map[string]bool{}}
}

// entry is one process. The fields above mu are set before the entry is
// published in the table and never change after.
type entry struct {
	id        string
	argv      []string
	startedAt time.Time
	limit     int64 // Options.BufferBytes
	proc      Proc
	pid       int

	stdinSem chan struct{}  // capacity 1: held by the one stdin writer
	stdinR   *io.PipeReader // nil without stdinOpen
	stdinW   *io.PipeWriter
	done     chan struct{} // closed when the process ended

	mu         sync.Mutex
	state      string
	exit       *agentproto.ExitStatus
	lostReason string
	endedAt    time.Time
	stdinOpen  bool
	tty        *agentproto.TtySize // current size; nil without a terminal
	ending     bool                // end has begun (notify running): no second end
	out        buffer
}

// Start starts a detached command under id and returns at once with its
// first ProcInfo (usually running; a command that could not start is already
// exited with Exit.ErrorKind set).
//
// ctx is the command's lifetime, not a request's: pass the sandbox's
// long-lived context (cancelling it kills the command), never the context
// of the HTTP request that asked for the start. start is called with it.
//
// stdin: with stdinOpen the command reads a pipe that WriteStdin feeds;
// stdin (copied) is written into it first, by a goroutine, so Start does
// not wait for the command to read. Without stdinOpen the command reads
// stdin and then EOF (/dev/null when stdin is empty), and StdinOpen is
// false from the start.
//
// Errors: agentproto.ErrProcExists, agentproto.ErrProcLimit,
// agentproto.ErrProcTableClosed (all wrapped with the id), or start's error
// wrapped. When the table is closed while start runs, the new command is
// killed, OnExit is not called and the error wraps
// agentproto.ErrProcTableClosed.
func (t *Table) Start(ctx context.Context, id string, req agentproto.ExecRequest, stdin []byte, stdinOpen bool, start StartFunc) (agentproto.ProcInfo, error) {
	if id == "" {
		return agentproto.ProcInfo{}, errors.New("process: start: empty id: give each process a unique id")
	}
	t.mu.Lock()
	switch {
	case t.closed:
		t.mu.Unlock()
		return agentproto.ProcInfo{}, fmt.Errorf("process %s: %w: the sandbox is going away", id, agentproto.ErrProcTableClosed)
	case t.procs[id] != nil || t.pending[id]:
		t.mu.Unlock()
		return agentproto.ProcInfo{}, fmt.Errorf("process %s: %w: choose another id", id, agentproto.ErrProcExists)
	case len(t.order)+len(t.pending) >= t.opts.MaxProcesses && !t.evictLocked():
		t.mu.Unlock()
		return agentproto.ProcInfo{}, fmt.Errorf("process %s: %w: all %d kept processes still run; wait for or kill one", id, agentproto.ErrProcLimit, t.opts.MaxProcesses)
	}
	t.pending[id] = true
	t.mu.Unlock()

	e := &entry{
		id:        id,
		argv:      slices.Clone(req.Argv),
		startedAt: time.Now(),
		limit:     int64(t.opts.BufferBytes),
		stdinSem:  make(chan struct{}, 1),
		done:      make(chan struct{}),
		state:     agentproto.ProcRunning,
	}
	if req.Tty != nil {
		size := *req.Tty
		e.tty = &size
	}
	var in io.Reader // stays a nil interface for /dev/null
	switch {
	case stdinOpen:
		e.stdinR, e.stdinW = io.Pipe()
		e.stdinOpen = true
		in = e.stdinR
	case len(stdin) > 0:
		in = bytes.NewReader(bytes.Clone(stdin))
	}
	p, err := start(ctx, req, in, streamWriter{e, StreamStdout}, streamWriter{e, StreamStderr})
	if err != nil {
		t.mu.Lock()
		delete(t.pending, id)
		t.mu.Unlock()
		if e.stdinR != nil {
			e.stdinR.CloseWithError(agentproto.ErrProcExited)
		}
		return agentproto.ProcInfo{}, fmt.Errorf("process %s: start: %w", id, err)
	}
	e.proc, e.pid = p, p.Pid()
	if stdinOpen && len(stdin) > 0 {
		e.stdinSem <- struct{}{} // free: nobody else knows e yet
		initial := bytes.Clone(stdin)
		go func() {
			defer func() { <-e.stdinSem }()
			_, _ = e.stdinW.Write(initial) // fails with agentproto.ErrProcExited if it ends first
		}()
	}

	t.mu.Lock()
	delete(t.pending, id)
	if t.closed {
		t.mu.Unlock()
		e.end(agentproto.ProcLost, nil, "the process table was closed while the command started", nil)
		t.waiters.Go(func() {
			kill(e)
			_, _ = p.Wait()
		})
		return agentproto.ProcInfo{}, fmt.Errorf("process %s: %w: the sandbox is going away", id, agentproto.ErrProcTableClosed)
	}
	t.procs[id] = e
	t.order = append(t.order, e)
	t.mu.Unlock()

	t.waiters.Go(func() { t.wait(e) })
	return e.info(), nil
}

// evictLocked forgets the oldest ended process and reports whether there
// was one.
func (t *Table) evictLocked() bool {
	for i, e := range t.order {
		if e.ended() {
			delete(t.procs, e.id)
			t.order = slices.Delete(t.order, i, i+1)
			return true
		}
	}
	return false
}

// wait records the command's end.
func (t *Table) wait(e *entry) {
	st, err := e.proc.Wait()
	if err == nil || st.ErrorKind != "" || st.Code >= 0 || st.Signal != 0 {
		e.end(agentproto.ProcExited, &st, "", t.opts.OnExit)
	} else {
		e.end(agentproto.ProcLost, nil, err.Error(), t.opts.OnExit)
	}
}

// lookup returns the entry of id or an error wrapping
// agentproto.ErrProcNotFound.
func (t *Table) lookup(id string) (*entry, error) {
	t.mu.Lock()
	e := t.procs[id]
	t.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("process %s: %w: list the sandbox's processes (agentbox ps SANDBOX, GET /v1/sandboxes/{id}/processes) for valid ids", id, agentproto.ErrProcNotFound)
	}
	return e, nil
}

// Get returns the process's current ProcInfo. Errors: agentproto.ErrProcNotFound.
func (t *Table) Get(id string) (agentproto.ProcInfo, error) {
	e, err := t.lookup(id)
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	return e.info(), nil
}

// List returns the ProcInfo of every kept process, oldest first.
func (t *Table) List() []agentproto.ProcInfo {
	t.mu.Lock()
	entries := slices.Clone(t.order)
	t.mu.Unlock()
	out := make([]agentproto.ProcInfo, len(entries))
	for i, e := range entries {
		out[i] = e.info()
	}
	return out
}

// Wait blocks until the process ended (exited or lost) or ctx is done and
// returns its ProcInfo. Errors: agentproto.ErrProcNotFound, ctx.Err().
func (t *Table) Wait(ctx context.Context, id string) (agentproto.ProcInfo, error) {
	e, err := t.lookup(id)
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	select {
	case <-e.done:
		return e.info(), nil
	case <-ctx.Done():
		return e.info(), fmt.Errorf("process %s: wait: %w", id, ctx.Err())
	}
}

// Signal sends sig to the process's group in the guest. Errors:
// agentproto.ErrProcNotFound, agentproto.ErrProcExited (it already ended,
// also when it ended just before the signal arrived), or the Proc's error
// (agent disconnected, ctx.Err()) wrapped.
func (t *Table) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	e, err := t.lookup(id)
	if err != nil {
		return err
	}
	if e.ended() || e.pid == 0 {
		return fmt.Errorf("process %s: %w: nothing to signal", id, agentproto.ErrProcExited)
	}
	if err := e.proc.Signal(ctx, sig); err != nil {
		if errors.Is(err, agentproto.ErrProcExited) {
			return fmt.Errorf("process %s: %w: nothing to signal", id, agentproto.ErrProcExited)
		}
		return fmt.Errorf("process %s: signal %d: %w", id, int(sig), err)
	}
	return nil
}

// CloseAll closes the table for good (its sandbox is stopped or removed):
// Start fails with agentproto.ErrProcTableClosed from now on, every process
// still running becomes lost with reason as its Error and is sent SIGKILL.
// Each process is ended (OnExit called) and then killed in its own goroutine,
// so the OnExits of different processes run concurrently with each other and
// with the kills; CloseAll returns once every OnExit returned and each kill
// was delivered or failed (a kill takes at most KillTimeout). Ended processes
// stay readable.
//
// A daemon that shuts down and leaves sandboxes running for adoption
// should not call it: closing the agent connection ends the commands, and
// their waiters mark them lost.
func (t *Table) CloseAll(reason string) {
	t.mu.Lock()
	t.closed = true
	entries := slices.Clone(t.order)
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range entries {
		wg.Go(func() {
			if ok, _ := e.end(agentproto.ProcLost, nil, reason, t.opts.OnExit); ok {
				kill(e)
			}
		})
	}
	wg.Wait()
}

// kill sends SIGKILL to e's command, bounded by KillTimeout; failures
// (already gone, agent disconnected) are ignored.
func kill(e *entry) {
	if e.pid == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), KillTimeout)
	defer cancel()
	_ = e.proc.Signal(ctx, syscall.SIGKILL)
}

// end marks e ended with state (once: the first caller wins, later ones get
// false) and returns its final ProcInfo. notify, if not nil, is called with that
// ProcInfo before the end is visible to readers (state, output followers, Wait),
// so what it records (the daemon's audit entry and exec history) is there by
// the time anyone sees the process ended. It closes stdin (pending writes
// fail with agentproto.ErrProcExited) and wakes followers.
func (e *entry) end(state string, exit *agentproto.ExitStatus, reason string, notify func(agentproto.ProcInfo)) (bool, agentproto.ProcInfo) {
	e.mu.Lock()
	if e.state != agentproto.ProcRunning || e.ending {
		e.mu.Unlock()
		return false, agentproto.ProcInfo{}
	}
	e.ending = true
	info := e.infoLocked()
	e.mu.Unlock()
	now := time.Now()
	info.State, info.Error, info.StdinOpen, info.EndedNs = state, reason, false, now.UnixNano()
	if exit != nil {
		x := *exit
		info.Exit = &x
	}
	if notify != nil {
		notify(info)
	}
	e.mu.Lock()
	e.state, e.exit, e.lostReason, e.endedAt = state, exit, reason, now
	e.stdinOpen = false
	e.out.broadcast()
	close(e.done)
	e.mu.Unlock()
	if e.stdinR != nil {
		e.stdinR.CloseWithError(agentproto.ErrProcExited)
	}
	return true, info
}

// ended reports whether the process has ended.
func (e *entry) ended() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// info returns a snapshot of e.
func (e *entry) info() agentproto.ProcInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.infoLocked()
}

func (e *entry) infoLocked() agentproto.ProcInfo {
	in := agentproto.ProcInfo{
		ID:            e.id,
		Pid:           e.pid,
		Argv:          slices.Clone(e.argv),
		State:         e.state,
		Error:         e.lostReason,
		StdinOpen:     e.stdinOpen,
		OutputBytes:   e.out.total,
		OutputDropped: e.out.total - e.out.kept,
		StartedNs:     e.startedAt.UnixNano(),
	}
	if in.Argv == nil {
		in.Argv = []string{} // "argv": [] on the wire, never null
	}
	if !e.endedAt.IsZero() {
		in.EndedNs = e.endedAt.UnixNano()
	}
	if e.exit != nil {
		x := *e.exit
		in.Exit = &x
	}
	if e.tty != nil {
		size := *e.tty
		in.Tty = &size
	}
	return in
}

// Forget removes an ended process from the table (its output and status are
// gone). Errors: agentproto.ErrProcNotFound; agentproto.ErrProcRunning
// (wrapped) while it runs: signal it and wait first.
func (t *Table) Forget(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.procs[id]
	if e == nil {
		return fmt.Errorf("process %s: %w", id, agentproto.ErrProcNotFound)
	}
	if !e.ended() {
		return fmt.Errorf("process %s: %w: kill it and wait for its end first", id, agentproto.ErrProcRunning)
	}
	delete(t.procs, id)
	t.order = slices.DeleteFunc(t.order, func(x *entry) bool { return x == e })
	return nil
}

// Resize sets the size of the process's terminal and returns its ProcInfo with
// the new size. Errors: agentproto.ErrProcNotFound, agentproto.ErrProcExited
// (it already ended), agentproto.ErrProcNoTty (it runs without a terminal),
// the Terminal's error wrapped.
func (t *Table) Resize(id string, size agentproto.TtySize) (agentproto.ProcInfo, error) {
	e, err := t.lookup(id)
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	term, ok := e.proc.(Terminal)
	e.mu.Lock()
	hasTty := e.tty != nil
	e.mu.Unlock()
	switch {
	case !hasTty || !ok:
		return agentproto.ProcInfo{}, fmt.Errorf("process %s: %w: only a process started with a terminal (tty) has a size to change", id, agentproto.ErrProcNoTty)
	case e.ended():
		return agentproto.ProcInfo{}, fmt.Errorf("process %s: resize: %w", id, agentproto.ErrProcExited)
	}
	if err := term.Resize(size); err != nil {
		if errors.Is(err, agentproto.ErrProcExited) {
			return agentproto.ProcInfo{}, fmt.Errorf("process %s: resize: %w", id, agentproto.ErrProcExited)
		}
		return agentproto.ProcInfo{}, fmt.Errorf("process %s: resize: %w", id, err)
	}
	e.mu.Lock()
	e.tty = &size
	info := e.infoLocked()
	e.mu.Unlock()
	return info, nil
}
