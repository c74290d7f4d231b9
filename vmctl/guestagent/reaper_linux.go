package guestagent

import (
	"errors"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// errProcessDone is returned when signalling a process that was reaped.
var errProcessDone = errors.New("guestagent: process already finished")

// reaper owns every wait for a child of this process. One mutex serialises
// fork+registration, wait4+delivery and signalling: a status can therefore
// never arrive before its pid is registered, and a process group is never
// signalled after its leader was reaped (when its pid could be reused).
type reaper struct {
	mu    sync.Mutex
	procs map[int]*child // registered, not yet reaped
}

// child is a process started through the reaper.
type child struct {
	pid  int
	done chan struct{} // closed once reaped
	// status and reaped are written under reaper.mu; status may be read
	// without it after done is closed.
	status syscall.WaitStatus
	reaped bool
}

var (
	reaperOnce sync.Once
	theReaper  *reaper
)

// StartReaper starts the process-wide reaper if it is not running yet and
// returns. When the process is not PID 1 it first becomes a child subreaper
// (PR_SET_CHILD_SUBREAPER), so orphaned grandchildren are reparented to it
// and reaped too. From then on the reaper answers every SIGCHLD with
// wait4(-1, WNOHANG) until no exited child is left: statuses of processes
// started by this package go to their waiters, all others are dropped.
// Serve calls it; PID 1 programs call it first thing. It is idempotent.
func StartReaper() {
	reaperOnce.Do(func() {
		r := &reaper{procs: map[int]*child{}}
		if os.Getpid() != 1 {
			// Failure (old kernel) only means orphans go to PID 1.
			_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
		}
		sigc := make(chan os.Signal, 1)
		signal.Notify(sigc, syscall.SIGCHLD)
		go func() {
			for {
				r.reapAll()
				<-sigc
			}
		}()
		theReaper = r
	})
}

func getReaper() *reaper {
	StartReaper()
	return theReaper
}

// reapAll reaps every exited child without blocking.
func (r *reaper) reapAll() {
	for {
		var ws syscall.WaitStatus
		r.mu.Lock()
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			r.mu.Unlock()
			continue
		}
		if err != nil || pid <= 0 {
			r.mu.Unlock()
			return
		}
		if c := r.procs[pid]; c != nil {
			delete(r.procs, pid)
			c.status = ws
			c.reaped = true
			close(c.done)
		}
		r.mu.Unlock()
	}
}

// start forks and execs path with attr, registers the child and resets its
// OOM score adjustment to 0 (the agent runs at -1000 and children inherit
// it). Errors are ForkExec's, typically a syscall.Errno.
func (r *reaper) start(path string, argv []string, attr *syscall.ProcAttr) (*child, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return nil, err
	}
	c := &child{pid: pid, done: make(chan struct{})}
	r.procs[pid] = c
	// The child cannot be reaped (nor its pid reused) while r.mu is held.
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("0\n"), 0)
	return c, nil
}

// signalGroup sends sig to the process group led by c, unless c was reaped
// (then it returns errProcessDone).
func (r *reaper) signalGroup(c *child, sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.reaped {
		return errProcessDone
	}
	return syscall.Kill(-c.pid, sig)
}

// ProtectFromOOM sets the calling process's OOM score adjustment to -1000,
// so the kernel's OOM killer never picks the agent; commands it starts are
// reset to 0. It needs CAP_SYS_RESOURCE; the error is returned for the
// caller to log.
func ProtectFromOOM() error {
	return os.WriteFile("/proc/self/oom_score_adj", []byte("-1000\n"), 0)
}
