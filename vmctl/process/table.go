package process

import (
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

// Process states, the values of Info.State: the agent protocol's
// (agentproto.ProcRunning, …, which the guest's table uses as they are),
// so the guest's and the host's tables agree; these are the host's names
// for them, not a second declaration. They equal api.ProcessRunning,
// api.ProcessExited and api.ProcessLost (vmctl/api, which links the
// standard library only, declares the API's) and are part of the API.
const (
	// StateRunning: the command runs (or has not reported its end yet).
	StateRunning = agentproto.ProcRunning
	// StateExited: the command ended and Info.Exit says how (exit code,
	// signal, timeout, or why it could not start).
	StateExited = agentproto.ProcExited
	// StateLost: the guest could not be asked how the command ended (the
	// guest died, or forgot it), or the table was closed by CloseAll;
	// Info.Error says which. Its real fate is unknown.
	StateLost = agentproto.ProcLost
)

// DefaultMaxProcesses is how many processes a table keeps, running and
// ended ones together: the guest agent's own maximum.
const DefaultMaxProcesses = agentproto.ProcMax

// KillTimeout bounds each SIGKILL that CloseAll sends to a running
// command.
const KillTimeout = 2 * time.Second

// Guest is the guest agent's table of detached processes, as the host
// reaches it: *agent.Client, or *sandbox.Sandbox (which checks that the
// sandbox runs and explains a dead guest). Errors are the agent's:
// *agentproto.Error with its code, agent.ErrDisconnected, ctx.Err().
type Guest interface {
	SpawnProcess(ctx context.Context, id string, req agentproto.ExecRequest, stdinData []byte, stdinOpen bool) (agentproto.ProcInfo, error)
	ListProcesses(ctx context.Context) ([]agentproto.ProcInfo, error)
	GetProcess(ctx context.Context, id string) (agentproto.ProcInfo, error)
	WaitProcess(ctx context.Context, id string) (agentproto.ProcInfo, error)
	ProcessOutput(ctx context.Context, id string, offset int64, follow bool, emit func(agentproto.ProcChunk) error) (agentproto.ProcOutputEnd, error)
	WriteProcessStdin(ctx context.Context, id string, r io.Reader, closeAfter bool) (int64, error)
	SignalProcess(ctx context.Context, id string, sig syscall.Signal) error
	ForgetProcess(ctx context.Context, id string) error
	ResizeProcess(ctx context.Context, id string, size agentproto.TtySize) (agentproto.ProcInfo, error)
}

// Options configures a Table. The zero value is usable.
type Options struct {
	// MaxProcesses is how many processes the table keeps, ended ones
	// included. To start one more, the oldest ended process is forgotten
	// (here and in the guest); when all of them still run, Start fails
	// with ErrTooMany. 0 means DefaultMaxProcesses.
	MaxProcesses int
	// OnExit, if set, is called once per process when the table sees it
	// end (exited or lost), with its final Info, from the goroutine that
	// saw the end, so calls for different processes may run concurrently.
	// It runs without the table's locks held and before the end is
	// visible to readers (Get, Wait, Output). Adopt calls it for
	// processes that ended while no table watched them, unless its
	// recorded says they were recorded already.
	OnExit func(Info)
}

// Info is the host's snapshot of one process: what the daemon accounts,
// records and answers. A detached process has three types, one per
// layer, and no more:
//   - agentproto.ProcInfo is the guest's answer on the agent protocol and
//     the guest table's own snapshot (vmctl/guestagent/procs): the
//     guest's clock readings in nanoseconds, the protocol's JSON.
//   - Info (this) is the host's own account, not a copy of the guest's:
//     StartedAt and EndedAt are the host's clock where the host saw the
//     start or the end (a guest's clock may be off; the guest's readings
//     are taken only for what happened while no host watched, Adopt), as
//     time.Time, and StateLost is also the host's verdict when the guest
//     cannot be asked at all (it died, the table was closed), which no
//     guest answer can say. The daemon's bookkeeping
//     (exec history, audit, adoption) works on it, below vmctl/api.
//   - api.Process is the REST API's JSON (cmd, RFC 3339 times, ended_at
//     absent while running, the exit in the API's ExitStatus): vmctl/api
//     links the standard library only (no agentproto), and vmctl/sandbox
//     and this package never import it, so the daemon converts.
type Info struct {
	// ID is the caller's id of the process, unique in the table.
	ID string
	// Pid is the guest process id; 0 if the command could not start.
	Pid int
	// Argv is the command line it was started with.
	Argv []string
	// State is StateRunning, StateExited or StateLost.
	State string
	// Exit is set when State is StateExited.
	Exit *agentproto.ExitStatus
	// Error says why the process is StateLost; empty otherwise.
	Error string
	// StdinOpen says whether WriteStdin still accepts bytes.
	StdinOpen bool
	// Tty is the current size of the process's terminal (started with
	// ExecRequest.Tty; Resize changes it); nil when it has none.
	Tty *agentproto.TtySize
	// OutputBytes is the total of stdout and stderr bytes produced, the
	// end offset of the combined output.
	OutputBytes int64
	// OutputDropped is how many of the oldest output bytes fell out of
	// the guest's ring: the smallest offset Output can still read.
	OutputDropped int64
	// StartedAt is when it started (the guest's clock for adopted ones).
	StartedAt time.Time
	// EndedAt is when it ended; zero while running.
	EndedAt time.Time
}

// Table is the host's view of one sandbox's detached processes, which the
// guest agent keeps (output ring, stdin, exit status): it starts them,
// watches each for its end (OnExit), and passes output, stdin and signals
// through to the guest. It holds no output. A restarted host makes a new
// Table and Adopts what the guest kept. It is safe for concurrent use.
type Table struct {
	opts Options
	g    Guest

	mu sync.Mutex
	// life is the watchers'; it ends with CloseAll, Detach or Suspend
	// (Resume makes a new one).
	life      context.Context
	stop      context.CancelFunc
	procs     map[string]*entry
	order     []*entry        // the entries of procs, oldest first
	pending   map[string]bool // ids being spawned
	closed    bool
	suspended bool

	watchers sync.WaitGroup
}

// NewTable returns an empty table of g's processes.
func NewTable(g Guest, opts Options) *Table {
	if opts.MaxProcesses <= 0 {
		opts.MaxProcesses = DefaultMaxProcesses
	}
	life, stop := context.WithCancel(context.Background())
	return &Table{opts: opts, g: g, life: life, stop: stop, procs: map[string]*entry{}, pending: map[string]bool{}}
}

// entry is one process. id, argv, pid and startedAt never change.
type entry struct {
	id        string
	argv      []string
	pid       int
	startedAt time.Time
	done      chan struct{} // closed when the end is visible

	mu     sync.Mutex
	last   Info // latest known; final once done is closed
	ending bool

	watched bool // a watcher waits for its end; guarded by Table.mu
}

// Start starts a detached command in the guest under id and returns its
// first Info (running; a command that could not start is already exited
// with Exit.ErrorKind set, and OnExit was called). ctx bounds the start
// request only: the command lives in the guest until it ends or is
// signalled. stdin is written to its stdin first; with stdinOpen its
// stdin stays open for WriteStdin, else EOF follows.
//
// Errors: ErrExists, ErrTooMany, ErrClosed (all wrapped with the id), or
// the guest's error wrapped.
func (t *Table) Start(ctx context.Context, id string, req agentproto.ExecRequest, stdin []byte, stdinOpen bool) (Info, error) {
	if id == "" {
		return Info{}, errors.New("process: start: empty id: give each process a unique id")
	}
	t.mu.Lock()
	switch {
	case t.closed:
		t.mu.Unlock()
		return Info{}, fmt.Errorf("process %s: %w: the sandbox is going away", id, ErrClosed)
	case t.procs[id] != nil || t.pending[id]:
		t.mu.Unlock()
		return Info{}, fmt.Errorf("process %s: %w: choose another id", id, ErrExists)
	}
	var evicted *entry
	if len(t.order)+len(t.pending) >= t.opts.MaxProcesses {
		if evicted = t.evictLocked(); evicted == nil {
			t.mu.Unlock()
			return Info{}, fmt.Errorf("process %s: %w: all %d kept processes still run; wait for or kill one", id, ErrTooMany, t.opts.MaxProcesses)
		}
	}
	t.pending[id] = true
	t.mu.Unlock()
	if evicted != nil {
		_ = t.g.ForgetProcess(ctx, evicted.id) // best effort: the guest evicts too
	}

	gi, err := t.g.SpawnProcess(ctx, id, req, stdin, stdinOpen)
	t.mu.Lock()
	delete(t.pending, id)
	if err != nil {
		t.mu.Unlock()
		return Info{}, fmt.Errorf("process %s: start: %w", id, agentproto.ProcSentinel(err))
	}
	e := newEntry(gi, time.Now())
	t.procs[id] = e
	t.order = append(t.order, e)
	t.mu.Unlock()
	if gi.State != agentproto.ProcRunning {
		t.end(e, gi, "", false)
		return e.info(), nil
	}
	t.watch(e)
	return e.info(), nil
}

// newEntry makes the entry of a guest process; startedAt is used unless
// zero (then the guest's start time).
func newEntry(gi agentproto.ProcInfo, startedAt time.Time) *entry {
	if startedAt.IsZero() {
		startedAt = time.Unix(0, gi.StartedNs)
	}
	e := &entry{id: gi.ID, argv: slices.Clone(gi.Argv), pid: gi.Pid, startedAt: startedAt, done: make(chan struct{})}
	e.last = e.fromGuest(gi)
	return e
}

// fromGuest converts the guest's view of e.
func (e *entry) fromGuest(gi agentproto.ProcInfo) Info {
	in := Info{ID: e.id, Pid: e.pid, Argv: slices.Clone(e.argv), State: gi.State, Error: gi.Error,
		StdinOpen: gi.StdinOpen, OutputBytes: gi.OutputBytes, OutputDropped: gi.OutputDropped, StartedAt: e.startedAt}
	if gi.Exit != nil {
		x := *gi.Exit
		in.Exit = &x
	}
	if gi.EndedNs != 0 {
		in.EndedAt = time.Unix(0, gi.EndedNs)
	}
	if gi.Tty != nil {
		size := *gi.Tty
		in.Tty = &size
	}
	return in
}

// evictLocked forgets the oldest ended process and returns it, or nil.
func (t *Table) evictLocked() *entry {
	for i, e := range t.order {
		if e.ended() {
			delete(t.procs, e.id)
			t.order = slices.Delete(t.order, i, i+1)
			return e
		}
	}
	return nil
}

// watch waits in the background for e's end in the guest, unless a
// watcher does already or the table is closed or suspended (Resume
// watches it then).
func (t *Table) watch(e *entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.suspended || e.watched {
		return
	}
	e.watched = true
	life := t.life
	t.watchers.Go(func() {
		gi, err := t.g.WaitProcess(life, e.id)
		switch {
		case err == nil:
			t.end(e, gi, "", false)
		case life.Err() != nil:
			// Detached, closed or suspended: the process runs on in the
			// guest.
			t.mu.Lock()
			e.watched = false
			t.mu.Unlock()
		default:
			t.end(e, agentproto.ProcInfo{State: StateLost}, err.Error(), false)
		}
	})
}

// end makes e's end visible (once; later calls do nothing): OnExit first,
// then readers. gi is the guest's final view; reason makes it lost. The
// end time is now, unless ago (it ended while no host watched: the
// guest's clock says when).
func (t *Table) end(e *entry, gi agentproto.ProcInfo, reason string, ago bool) {
	e.mu.Lock()
	if e.ending {
		e.mu.Unlock()
		return
	}
	e.ending = true
	info := e.last
	e.mu.Unlock()
	if reason == "" && gi.State != StateRunning {
		info = e.fromGuest(gi)
	} else {
		info.State, info.Error, info.Exit = StateLost, reason, nil
	}
	if info.State == StateRunning { // the guest says it ended: trust the wait
		info.State = StateLost
	}
	info.StdinOpen = false
	if !ago || info.EndedAt.IsZero() {
		info.EndedAt = time.Now() // the host's clock: the guest's may be off
	}
	if t.opts.OnExit != nil {
		t.opts.OnExit(info)
	}
	e.mu.Lock()
	e.last = info
	close(e.done)
	e.mu.Unlock()
}

// ended reports whether e's end is visible.
func (e *entry) ended() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// info returns the latest known Info of e.
func (e *entry) info() Info {
	e.mu.Lock()
	defer e.mu.Unlock()
	in := e.last
	in.Argv = slices.Clone(in.Argv)
	if in.Tty != nil {
		size := *in.Tty
		in.Tty = &size
	}
	return in
}

// update records the guest's current view of a running e and returns
// the Info to show: once the guest says it ended, the final Info (after
// OnExit), waiting for it at most until ctx ends.
func (e *entry) update(ctx context.Context, gi agentproto.ProcInfo) Info {
	if gi.State == agentproto.ProcRunning {
		e.mu.Lock()
		if !e.ending {
			e.last = e.fromGuest(gi)
		}
		e.mu.Unlock()
		return e.info()
	}
	select {
	case <-e.done:
	case <-ctx.Done():
	}
	return e.info()
}

// lookup returns the entry of id or an error wrapping ErrNotFound.
func (t *Table) lookup(id string) (*entry, error) {
	t.mu.Lock()
	e := t.procs[id]
	t.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("process %s: %w: list the sandbox's processes (agentbox ps SANDBOX, GET /v1/sandboxes/{id}/processes) for valid ids", id, ErrNotFound)
	}
	return e, nil
}

// Get returns the process's current Info, asking the guest while it
// runs (the last known Info when the guest cannot answer). Errors:
// ErrNotFound.
func (t *Table) Get(ctx context.Context, id string) (Info, error) {
	e, err := t.lookup(id)
	if err != nil {
		return Info{}, err
	}
	if e.ended() {
		return e.info(), nil
	}
	gi, err := t.g.GetProcess(ctx, id)
	if err != nil {
		return e.info(), nil
	}
	return e.update(ctx, gi), nil
}

// List returns the Info of every kept process, oldest first, asking the
// guest once for those that run (their last known Info when it cannot
// answer).
func (t *Table) List(ctx context.Context) []Info {
	t.mu.Lock()
	entries := slices.Clone(t.order)
	t.mu.Unlock()
	var guest map[string]agentproto.ProcInfo
	if slices.ContainsFunc(entries, func(e *entry) bool { return !e.ended() }) {
		if list, err := t.g.ListProcesses(ctx); err == nil {
			guest = map[string]agentproto.ProcInfo{}
			for _, gi := range list {
				guest[gi.ID] = gi
			}
		}
	}
	out := make([]Info, len(entries))
	for i, e := range entries {
		if gi, ok := guest[e.id]; ok && !e.ended() {
			out[i] = e.update(ctx, gi)
		} else {
			out[i] = e.info()
		}
	}
	return out
}

// Wait blocks until the process ended (exited or lost) or ctx is done and
// returns its Info. Errors: ErrNotFound, ctx.Err().
func (t *Table) Wait(ctx context.Context, id string) (Info, error) {
	e, err := t.lookup(id)
	if err != nil {
		return Info{}, err
	}
	select {
	case <-e.done:
		return e.info(), nil
	case <-ctx.Done():
		return e.info(), fmt.Errorf("process %s: wait: %w", id, ctx.Err())
	}
}

// Signal sends sig to the process's group in the guest. Errors:
// ErrNotFound, ErrExited (it already ended, also when it ended just
// before the signal arrived), or the guest's error wrapped.
func (t *Table) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	e, err := t.lookup(id)
	if err != nil {
		return err
	}
	if e.ended() || e.pid == 0 {
		return fmt.Errorf("process %s: %w: nothing to signal", id, ErrExited)
	}
	if err := t.g.SignalProcess(ctx, id, sig); err != nil {
		return fmt.Errorf("process %s: signal %d: %w", id, int(sig), agentproto.ProcSentinel(err))
	}
	return nil
}

// WriteStdin copies r to the process's stdin in the guest and, if
// closeAfter, then closes it (the command reads EOF). The guest
// serializes concurrent writers. r nil writes nothing (with closeAfter:
// just close). It returns the number of bytes the command's stdin
// accepted; when ctx ends first, the bytes sent so far, and stdin stays
// open.
//
// Errors: ErrNotFound, ErrExited, ErrStdinClosed (never opened, or closed
// by an earlier closeAfter), r's error wrapped, the guest's error
// wrapped, ctx.Err() wrapped.
func (t *Table) WriteStdin(ctx context.Context, id string, r io.Reader, closeAfter bool) (int64, error) {
	e, err := t.lookup(id)
	if err != nil {
		return 0, err
	}
	if e.ended() {
		return 0, fmt.Errorf("process %s: write stdin: %w", id, ErrExited)
	}
	n, err := t.g.WriteProcessStdin(ctx, id, r, closeAfter)
	if err != nil {
		err = agentproto.ProcSentinel(err)
		if errors.Is(err, ErrStdinClosed) {
			return n, fmt.Errorf("process %s: write stdin: %w: start the process with stdin_open, and close stdin only with the last write", id, err)
		}
		return n, fmt.Errorf("process %s: write stdin: %w", id, err)
	}
	return n, nil
}

// Resize sets the size of the process's terminal in the guest (SIGWINCH
// to its foreground group) and returns its Info with the new size.
// Errors: ErrNotFound, ErrNoTty (it runs without a terminal), ErrExited,
// the guest's error wrapped.
func (t *Table) Resize(ctx context.Context, id string, size agentproto.TtySize) (Info, error) {
	e, err := t.lookup(id)
	if err != nil {
		return Info{}, err
	}
	in := e.info()
	switch {
	case in.Tty == nil:
		return Info{}, fmt.Errorf("process %s: %w: only a process started with a terminal (exec -d -t, \"tty\" in the request) has a size to change", id, ErrNoTty)
	case e.ended():
		return Info{}, fmt.Errorf("process %s: resize: %w", id, ErrExited)
	}
	gi, err := t.g.ResizeProcess(ctx, id, size)
	if err != nil {
		return Info{}, fmt.Errorf("process %s: resize: %w", id, agentproto.ProcSentinel(err))
	}
	return e.update(ctx, gi), nil
}

// CloseAll closes the table for good (its sandbox is stopped or removed):
// Start fails with ErrClosed from now on, and every process still running
// becomes lost with reason as its Error (OnExit called) and is sent
// SIGKILL (each bounded by KillTimeout; failures ignored: a stopped guest
// has no processes). It returns once every OnExit returned.
func (t *Table) CloseAll(reason string) {
	t.mu.Lock()
	t.closed = true
	entries := slices.Clone(t.order)
	stop := t.stop
	t.mu.Unlock()
	stop()
	var wg sync.WaitGroup
	for _, e := range entries {
		if e.ended() {
			continue
		}
		wg.Go(func() {
			t.end(e, agentproto.ProcInfo{State: StateLost}, reason, false)
			if e.pid != 0 {
				ctx, cancel := context.WithTimeout(context.Background(), KillTimeout)
				defer cancel()
				_ = t.g.SignalProcess(ctx, e.id, syscall.SIGKILL)
			}
		})
	}
	wg.Wait()
}

// Detach stops watching (a daemon that shuts down and leaves its
// sandboxes running): the processes run on in the guest, no OnExit is
// called, and the next host Adopts them. Start fails with ErrClosed from
// now on. It returns once the watchers stopped.
func (t *Table) Detach() {
	t.mu.Lock()
	t.closed = true
	stop := t.stop
	t.mu.Unlock()
	stop()
	t.watchers.Wait()
}

// Suspend stops watching without ending anything, until Resume: the
// guest is about to go away with its memory saved (a sandbox paused to
// disk), so its processes continue when it comes back, and the agent
// connection's loss must not make them lost. Meanwhile no OnExit is
// called, Get and List show the last known Info (the guest cannot be
// asked), and Start fails with the guest's error. It returns once the
// watchers stopped. A closed or suspended table ignores it.
func (t *Table) Suspend() {
	t.mu.Lock()
	if t.closed || t.suspended {
		t.mu.Unlock()
		return
	}
	t.suspended = true
	stop := t.stop
	t.mu.Unlock()
	stop()
	t.watchers.Wait()
}

// Recall puts into an empty table the running processes a previous host
// knew of a guest that cannot be asked now (its sandbox paused when that
// host went away; it saved them with the pause), as that host last saw
// them (infos; ended ones are skipped): the table is suspended, as by
// Suspend, so they are listed and looked up with that Info, nothing
// watches them and no OnExit is called until Resume, which follows them
// in the guest again (a recalled process the guest no longer keeps ends
// lost then). Calls that need the guest (Output, WriteStdin, Signal,
// Resize) fail with its error meanwhile. A closed table ignores it, and
// so does one that knows a process already.
func (t *Table) Recall(infos []Info) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || len(t.procs) > 0 || len(t.pending) > 0 {
		return
	}
	for _, in := range infos {
		if in.State != StateRunning || in.ID == "" || t.procs[in.ID] != nil {
			continue
		}
		e := &entry{id: in.ID, argv: slices.Clone(in.Argv), pid: in.Pid, startedAt: in.StartedAt, done: make(chan struct{})}
		e.last = in
		e.last.Argv = slices.Clone(in.Argv)
		if in.Tty != nil {
			size := *in.Tty
			e.last.Tty = &size
		}
		t.procs[in.ID] = e
		t.order = append(t.order, e)
	}
	if len(t.order) > 0 && !t.suspended {
		t.suspended = true
		t.stop()
	}
}

// Resume follows the guest's processes again after its sandbox resumed:
// after Suspend, every running process is watched again (one that ended
// while the guest ran before the save ends now, with OnExit once); then
// the processes the guest keeps that the table does not know are adopted
// as by Adopt with adopt (a host that restarted while the sandbox was
// paused starts with an empty table). On a table that was not suspended
// only the adoption runs. Errors: Adopt's (the watching is back anyway).
func (t *Table) Resume(ctx context.Context, adopt func(Info) (recorded bool)) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	if t.suspended {
		t.suspended = false
		t.life, t.stop = context.WithCancel(context.Background())
	}
	var rewatch []*entry
	for _, e := range t.order {
		if !e.watched && !e.ended() {
			rewatch = append(rewatch, e)
		}
	}
	t.mu.Unlock()
	for _, e := range rewatch {
		t.watch(e)
	}
	return t.Adopt(ctx, adopt)
}

// Adopt takes over the processes the guest keeps that the table does not
// know (those a previous host started). adopt, if not nil, is called for
// each one first, with its Info as the guest reports it; for an ended one
// it returns whether its end was recorded already (by the host that
// watched it). Running ones are then watched like started ones; ended ones
// are kept ended, with OnExit called unless recorded. So OnExit runs once
// per process across hosts as long as what it records is what adopt
// reads. Errors: the guest's, wrapped.
func (t *Table) Adopt(ctx context.Context, adopt func(Info) (recorded bool)) error {
	list, err := t.g.ListProcesses(ctx)
	if err != nil {
		return fmt.Errorf("process: adopt: %w", agentproto.ProcSentinel(err))
	}
	for _, gi := range list {
		t.mu.Lock()
		if t.closed || t.procs[gi.ID] != nil || t.pending[gi.ID] {
			t.mu.Unlock()
			continue
		}
		e := newEntry(gi, time.Time{})
		t.procs[gi.ID] = e
		t.order = append(t.order, e)
		t.mu.Unlock()
		recorded := adopt != nil && adopt(e.info())
		switch {
		case gi.State == agentproto.ProcRunning:
			t.watch(e)
		case recorded:
			e.mu.Lock()
			e.ending = true
			close(e.done)
			e.mu.Unlock()
		default:
			t.end(e, gi, "", true)
		}
	}
	return nil
}
