package guestagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

const (
	// drainIdle: once the command's main process exited, its output pipes
	// are read until a read would block this long (a background child may
	// keep them open forever).
	drainIdle = 50 * time.Millisecond
	// drainMax bounds the whole drain after exit, against a background
	// child that writes continuously.
	drainMax = 5 * time.Second
)

// process is a running command with the parent's ends of its pipes, or
// of its terminal.
type process struct {
	child     *child
	stdin     *os.File // write end, nil when stdin is not attached (or on a terminal)
	stdinOnce sync.Once
	stdout    *os.File // read ends, closed by their pumps
	stderr    *os.File // nil on a terminal: everything comes through stdout
	// tty is the terminal's master when the command runs on one
	// (ExecRequest.Tty): stdout is the same file, stdin frames are written
	// to it and resize frames set its size.
	tty *os.File

	exited    atomic.Bool // main process reaped: drain mode
	stopDrain atomic.Bool // drainMax reached
	timedOut  atomic.Bool
}

func (p *process) closeStdin() {
	if p.stdin != nil {
		p.stdinOnce.Do(func() { p.stdin.Close() })
	}
}

// execRegistry maps pids of running commands of a session, for OpSignal.
type execRegistry struct {
	mu    sync.Mutex
	procs map[int]*child
}

func (r *execRegistry) add(c *child) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs == nil {
		r.procs = map[int]*child{}
	}
	r.procs[c.pid] = c
}

func (r *execRegistry) remove(c *child) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.procs, c.pid)
}

func (r *execRegistry) get(pid int) *child {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[pid]
}

func validSignal(sig int) error {
	if sig < 1 || sig > 64 {
		return &agentproto.Error{Code: agentproto.CodeInvalid, Message: fmt.Sprintf("invalid signal %d", sig)}
	}
	return nil
}

// signal handles OpSignal.
func (s *server) signal(fw *agentproto.Writer, req *agentproto.SignalRequest) error {
	if err := validSignal(req.Signal); err != nil {
		return err
	}
	c := s.execs.get(req.Pid)
	if c == nil {
		return &agentproto.Error{Code: agentproto.CodeNotFound, Message: fmt.Sprintf("no running command with pid %d", req.Pid)}
	}
	if err := getReaper().signalGroup(c, syscall.Signal(req.Signal)); err != nil {
		if errors.Is(err, errProcessDone) {
			return &agentproto.Error{Code: agentproto.CodeNotFound, Message: fmt.Sprintf("command with pid %d has exited", req.Pid)}
		}
		return fmt.Errorf("kill %d: %w", -req.Pid, err)
	}
	return fw.WriteJSON(agentproto.FrameResponse, agentproto.Empty{})
}

// exec handles OpExec; see agentproto.OpExec for the frames.
func (s *server) exec(st *yamux.Stream, fr *agentproto.Reader, fw *agentproto.Writer, req *agentproto.ExecRequest) {
	p, err := startProcess(req, s.opts)
	if err != nil {
		status := agentproto.ExitStatus{Code: -1, ErrorKind: agentproto.ExecOther, Error: err.Error()}
		var se *startError
		if errors.As(err, &se) {
			status.ErrorKind = se.kind
		}
		s.log.Info("command did not start", "argv0", req.Argv[0], "kind", string(status.ErrorKind), "err", status.Error)
		_ = fw.WriteJSON(agentproto.FrameExit, status)
		return
	}
	r := getReaper()
	s.execs.add(p.child)
	defer s.execs.remove(p.child)
	if err := fw.WriteJSON(agentproto.FrameStarted, agentproto.Started{Pid: p.child.pid}); err != nil {
		_ = r.signalGroup(p.child, syscall.SIGKILL) // host gone
	}

	var exitSent atomic.Bool
	hostDone := make(chan struct{})
	go func() {
		defer close(hostDone)
		s.readHost(p, fr, &exitSent)
	}()

	status := p.supervise(time.Duration(req.TimeoutMs)*time.Millisecond, frameSink(fw))
	exitSent.Store(true)
	if err := fw.WriteJSON(agentproto.FrameExit, status); err != nil {
		s.log.Warn("cannot send exit status", "pid", p.child.pid, "err", err)
	}
	st.Close()
	<-hostDone // the host closes its side once it has the exit status
}

// readHost handles the host's frames of an exec stream until the stream
// ends; if it ends before the exit status was sent, the host abandoned the
// command and the process group is killed.
func (s *server) readHost(p *process, fr *agentproto.Reader, exitSent *atomic.Bool) {
	defer p.closeStdin()
	for {
		t, b, err := fr.ReadFrame()
		if err != nil {
			if !exitSent.Load() {
				_ = getReaper().signalGroup(p.child, syscall.SIGKILL)
			}
			return
		}
		switch t {
		case agentproto.FrameStdin:
			if p.tty != nil {
				// The terminal's input: its line discipline echoes, edits
				// lines and turns ^C into SIGINT. A write error means the
				// master was closed (the command ended).
				_, _ = p.tty.Write(b)
				continue
			}
			if p.stdin != nil {
				if _, err := p.stdin.Write(b); err != nil {
					p.closeStdin() // reader gone (EPIPE): drop the rest
				}
			}
		case agentproto.FrameStdinClose:
			p.closeStdin()
		case agentproto.FrameSignal:
			var m agentproto.SignalMessage
			if err := json.Unmarshal(b, &m); err != nil || validSignal(m.Signal) != nil {
				s.log.Warn("bad signal frame", "payload", string(b))
				continue
			}
			_ = getReaper().signalGroup(p.child, syscall.Signal(m.Signal))
		case agentproto.FrameResize:
			var sz agentproto.TtySize
			if err := json.Unmarshal(b, &sz); err != nil || sz.Validate() != nil {
				s.log.Warn("bad resize frame", "payload", string(b))
				continue
			}
			if p.tty == nil {
				s.log.Warn("resize frame for a command without a terminal", "pid", p.child.pid)
				continue
			}
			if err := setWinsize(p.tty, sz); err != nil && !errors.Is(err, os.ErrClosed) {
				s.log.Warn("resize", "pid", p.child.pid, "err", err)
			}
		default:
			s.log.Warn("unexpected frame on exec stream", "type", t.String())
		}
	}
}

// output is one output of a process and the frame type it goes out as.
type output struct {
	f *os.File
	t agentproto.FrameType
}

// outputs are the files the pumps read: stdout and stderr, or the
// terminal's master alone.
func (p *process) outputs() []output {
	if p.stderr == nil {
		return []output{{p.stdout, agentproto.FrameStdout}}
	}
	return []output{{p.stdout, agentproto.FrameStdout}, {p.stderr, agentproto.FrameStderr}}
}

// supervise runs p to its end: it pumps each of p's outputs to the
// sender sink makes for its frame type (FrameStdout, FrameStderr), kills
// the process group when timeout (if > 0) has passed, and once the main
// process exited drains the outputs (until they stay idle for drainIdle,
// for at most drainMax). It returns the exit status once every pump has
// ended, with stdin closed. The attached exec (frames to the host) and
// the detached processes (the table's buffers) share it.
func (p *process) supervise(timeout time.Duration, sink func(agentproto.FrameType) func([]byte)) agentproto.ExitStatus {
	r := getReaper()
	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(timeout, func() {
			// Mark before killing: the exit status may be read as soon as
			// the group dies, before this goroutine runs again.
			p.timedOut.Store(true)
			if r.signalGroup(p.child, syscall.SIGKILL) != nil {
				p.timedOut.Store(false) // the group was already gone
			}
		})
	}

	var pumps sync.WaitGroup
	for _, o := range p.outputs() {
		send := sink(o.t)
		pumps.Go(func() { p.pump(o.f, send) })
	}

	<-p.child.done
	if timer != nil {
		timer.Stop()
	}
	p.exited.Store(true)
	deadline := time.Now().Add(drainIdle)
	for _, o := range p.outputs() {
		o.f.SetReadDeadline(deadline)
	}
	hard := time.AfterFunc(drainMax, func() {
		p.stopDrain.Store(true)
		for _, o := range p.outputs() {
			o.f.SetReadDeadline(time.Unix(1, 0))
		}
	})
	pumps.Wait()
	hard.Stop()
	p.closeStdin()
	return exitStatus(p.child.status, p.timedOut.Load())
}

// frameSink is supervise's sink of an attached exec: each output goes to
// the host as frames of its type. Once the host stops accepting frames
// the sender discards, so the command never blocks on a full pipe.
func frameSink(fw *agentproto.Writer) func(agentproto.FrameType) func([]byte) {
	return func(t agentproto.FrameType) func([]byte) {
		forward := true
		return func(b []byte) {
			if forward && fw.WriteFrame(t, b) != nil {
				forward = false
			}
		}
	}
}

// pump passes f (stdout or stderr) to send in chunks of at most ChunkSize
// bytes until EOF or, once the process exited, until the pipe stays idle
// for drainIdle.
func (p *process) pump(f *os.File, send func([]byte)) {
	defer f.Close()
	buf := make([]byte, agentproto.ChunkSize)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			send(buf[:n])
			if p.exited.Load() && !p.stopDrain.Load() {
				f.SetReadDeadline(time.Now().Add(drainIdle))
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !p.stopDrain.Load() {
			// The idle deadline may have passed before this goroutine
			// ran (a busy guest): the poller then fails the Read without
			// calling read(2), and bytes the command wrote before it
			// exited would be lost. Take what the pipe holds now.
			drainNow(f, buf, send)
		}
		if err != nil {
			return
		}
	}
}

// drainNowMax bounds drainNow: what the main process wrote before it exited
// fits in the pipe (64 KiB by default); more can only come from a
// background child.
const drainNowMax = 1 << 20

// drainNow passes what f (a non-blocking pipe) holds right now to send,
// without waiting for more.
func drainNow(f *os.File, buf []byte, send func([]byte)) {
	if f.SetReadDeadline(time.Time{}) != nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for total := 0; total < drainNowMax; {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), buf)
			return true // never wait: EAGAIN means empty
		}); err != nil || rerr != nil || n <= 0 {
			return
		}
		send(buf[:n])
		total += n
	}
}

func exitStatus(ws syscall.WaitStatus, timedOut bool) agentproto.ExitStatus {
	switch {
	case ws.Exited():
		return agentproto.ExitStatus{Code: ws.ExitStatus()}
	case ws.Signaled():
		return agentproto.ExitStatus{Code: -1, Signal: int(ws.Signal()), TimedOut: timedOut}
	}
	return agentproto.ExitStatus{Code: -1, ErrorKind: agentproto.ExecOther, Error: fmt.Sprintf("unexpected wait status %#x", uint32(ws))}
}

// startProcess resolves and starts the command in its own process group.
// Errors are *startError (with the kind) or carry the ForkExec error.
func startProcess(req *agentproto.ExecRequest, opts Options) (*process, error) {
	var named *User // the account req.User names
	if req.User != "" {
		if named = LookupUser(req.User); named == nil {
			return nil, &startError{agentproto.ExecBadUser, fmt.Sprintf("user %s: no such user in the guest's /etc/passwd", req.User)}
		}
		r := *req
		uid, gid := named.UID, named.GID
		r.UID, r.GID = &uid, &gid
		req = &r
	}
	if req.UID == nil && opts.User != nil {
		// The agent's default user: commands do not run as root unless
		// the host asks for uid 0.
		r := *req
		uid, gid := opts.User.UID, opts.User.GID
		r.UID = &uid
		if r.GID == nil {
			r.GID = &gid
		}
		req = &r
	}
	uid := uint32(0)
	if req.UID != nil {
		uid = *req.UID
	}
	base := defaultEnv(uid, opts)
	if named != nil {
		// The named account's entry, not the first one with its uid.
		base = mergeEnv(base, []string{"HOME=" + named.Home, "USER=" + named.Name, "LOGNAME=" + named.Name})
	}
	env := mergeEnv(base, req.Env)
	if req.Tty != nil && lookupEnv(env, "TERM") == "" {
		env = append(env, "TERM="+defaultTerm)
	}
	dir := "/"
	switch {
	case req.Dir != "":
		dir = path.Clean(req.Dir)
	case named != nil:
		// As login(1): the home, or "/" when it is missing.
		if fi, err := os.Stat(named.Home); err == nil && fi.IsDir() {
			dir = named.Home
		}
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	argv0, err := lookPath(req.Argv[0], lookupEnv(env, "PATH"), dir)
	if err != nil {
		return nil, err
	}

	if req.Tty != nil {
		return startOnTerminal(req, argv0, dir, env)
	}

	var toClose []*os.File // the child's ends, closed once it started
	defer func() {
		for _, f := range toClose {
			f.Close()
		}
	}()
	p := &process{}
	var stdinChild *os.File
	if req.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		stdinChild, p.stdin = r, w
	} else {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		stdinChild = f
	}
	toClose = append(toClose, stdinChild)
	outR, outW, err := os.Pipe()
	if err != nil {
		p.closeStdin()
		return nil, err
	}
	toClose = append(toClose, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		p.closeStdin()
		outR.Close()
		return nil, err
	}
	toClose = append(toClose, errW)
	p.stdout, p.stderr = outR, errR

	sys := &syscall.SysProcAttr{Setpgid: true}
	setCommandAttrs(sys, req)
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []uintptr{stdinChild.Fd(), outW.Fd(), errW.Fd()},
		Sys:   sys,
	}
	c, err := getReaper().start(argv0, req.Argv, attr)
	if err != nil {
		p.closeStdin()
		outR.Close()
		errR.Close()
		return nil, startErrorOf(req.Argv[0], err)
	}
	p.child = c
	return p, nil
}

// setCommandAttrs puts the command cgroup and the request's credentials
// into sys.
func setCommandAttrs(sys *syscall.SysProcAttr, req *agentproto.ExecRequest) {
	useCommandCgroup(sys) // limits_linux.go
	if req.UID != nil || req.GID != nil {
		cred := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
		if req.UID != nil {
			cred.Uid, cred.Gid = *req.UID, *req.UID
		}
		if req.GID != nil {
			cred.Gid = *req.GID
		}
		sys.Credential = cred // Groups nil: supplementary groups are cleared
	}
}

// startOnTerminal starts the command of startProcess on a new
// pseudo-terminal of size req.Tty: the slave is its stdin, stdout, stderr
// and controlling terminal (setsid makes it a session and process group
// leader, so the group is signalled as for any command), the master stays
// with the agent.
func startOnTerminal(req *agentproto.ExecRequest, argv0, dir string, env []string) (*process, error) {
	master, slave, err := openPty(*req.Tty)
	if err != nil {
		return nil, err
	}
	defer slave.Close() // the child's end: the master reads EIO once every holder closed it
	sys := &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	setCommandAttrs(sys, req)
	fd := slave.Fd()
	attr := &syscall.ProcAttr{Dir: dir, Env: env, Files: []uintptr{fd, fd, fd}, Sys: sys}
	c, err := getReaper().start(argv0, req.Argv, attr)
	if err != nil {
		master.Close()
		return nil, startErrorOf(req.Argv[0], err)
	}
	return &process{child: c, stdout: master, tty: master}, nil
}

// startErrorOf classifies a ForkExec error like a shell would.
func startErrorOf(argv0 string, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s: %w", argv0, err)
	}
	switch errno {
	case syscall.ENOENT, syscall.ENOTDIR:
		return &startError{agentproto.ExecNotFound, fmt.Sprintf("%s: %v", argv0, errno)}
	case syscall.EACCES, syscall.EPERM, syscall.EISDIR:
		return &startError{agentproto.ExecPermission, fmt.Sprintf("%s: %v", argv0, errno)}
	case syscall.ENOEXEC:
		return &startError{agentproto.ExecNotExecutable, fmt.Sprintf("%s: %v", argv0, errno)}
	}
	return &startError{agentproto.ExecOther, fmt.Sprintf("%s: %v", argv0, errno)}
}
