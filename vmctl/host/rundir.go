package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// The state of an in-process run lives apart from a daemon's, one
// directory per run, so that its store never meets a daemon's store lock
// and a run killed with kill -9 can be found and cleaned up:
//
//	STATE/local/RUN-ID/        the run's daemon state (store, audit log,
//	                           sandboxes/ID/ with overlay and console log)
//	STATE/local/RUN-ID/lock    flock'ed by the run while its process lives
//	STATE/local/RUN-ID/runtime the run's runtime dir (one line)
//	STATE/local/RUN-ID/kept    present when Keep left the sandbox running
//	RUNTIME/local-RUN-ID/      the agent sockets
const (
	runsDir     = "local"
	lockFile    = "lock"
	runtimeFile = "runtime"
	keptFile    = "kept"
	runtimePfx  = "local-"
	newPfx      = ".new-" // a run directory being made (renamed into place once locked)
)

// runDir is one in-process run's state directories, locked while the
// run's process lives.
type runDir struct {
	// ID names the run (also its sandbox's agentbox.run-id label).
	ID string
	// Dir is STATE/local/ID, the in-process daemon's state dir.
	Dir string
	// RuntimeDir is RUNTIME/local-ID, its runtime dir.
	RuntimeDir string
	lock       *os.File
}

// newRunDir makes and locks the directories of run id. The run directory
// is made under a temporary name and renamed into place once locked, so a
// sweep never sees an unlocked live run.
func newRunDir(stateDir, runtimeDir, id string) (_ *runDir, err error) {
	parent := filepath.Join(stateDir, runsDir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("local run state: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, newPfx)
	if err != nil {
		return nil, fmt.Errorf("local run state: %w", err)
	}
	r := &runDir{ID: id, Dir: filepath.Join(parent, id), RuntimeDir: filepath.Join(runtimeDir, runtimePfx+id)}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
			os.RemoveAll(r.RuntimeDir)
			if r.lock != nil {
				r.lock.Close()
			}
		}
	}()
	if r.lock, err = os.OpenFile(filepath.Join(tmp, lockFile), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
		return nil, fmt.Errorf("local run lock: %w", err)
	}
	if err := unix.Flock(int(r.lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("local run lock: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, runtimeFile), []byte(r.RuntimeDir+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("local run state: %w", err)
	}
	if err := os.MkdirAll(r.RuntimeDir, 0o700); err != nil {
		return nil, fmt.Errorf("local run runtime dir: %w", err)
	}
	if err := os.Rename(tmp, r.Dir); err != nil {
		return nil, fmt.Errorf("local run state: %w", err)
	}
	return r, nil
}

// Keep marks the run kept (a sweep leaves it alone), with the command
// that removes it.
func (r *runDir) Keep(remove string) error {
	return os.WriteFile(filepath.Join(r.Dir, keptFile), []byte(remove+"\n"), 0o600)
}

// Close ends the run: unless it is kept (or keepFiles), its runtime and
// state directories are removed; the lock is released either way (a
// run's files left behind are then the next sweep's).
func (r *runDir) Close(keepFiles bool) error {
	var err error
	if !keepFiles {
		if _, kerr := os.Stat(filepath.Join(r.Dir, keptFile)); kerr != nil {
			err = errors.Join(os.RemoveAll(r.RuntimeDir), os.RemoveAll(r.Dir))
		}
	}
	return errors.Join(err, r.lock.Close())
}

// Domains is what Sweep needs of the sandbox driver (libvirt.Driver).
type Domains interface {
	ListDomains(ctx context.Context) ([]sandbox.DomainStatus, error)
	DestroyDomain(ctx context.Context, name string) error
}

// newDirAge is how old a run directory still being made (newPfx) must be
// before a sweep takes it for abandoned.
const newDirAge = time.Minute

// Sweep removes what in-process runs under stateDir left when their
// process died without cleaning up (kill -9, a crash, a power cut): every
// run directory whose lock it can take and that is not kept. For each it
// destroys the domains still named by it (libvirt's autodestroy normally
// did that already), removes its runtime dir (agent sockets) and its
// directory (overlays, console logs, store), and returns one line naming
// what it removed, for the caller to print. Errors are not reported: what
// could not be removed is the next sweep's.
func Sweep(ctx context.Context, stateDir string, drv Domains) []string {
	parent := filepath.Join(stateDir, runsDir)
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil
	}
	var running map[string]bool // domain name → exists
	var lines []string
	for _, e := range entries {
		name := e.Name()
		dir := filepath.Join(parent, name)
		if !e.IsDir() {
			continue
		}
		if strings.HasPrefix(name, newPfx) {
			if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < newDirAge {
				continue
			}
		}
		lock, ok := tryLock(filepath.Join(dir, lockFile))
		if !ok {
			continue // alive, or not a run directory
		}
		if _, err := os.Stat(filepath.Join(dir, keptFile)); err == nil {
			lock.Close()
			continue
		}
		if running == nil {
			running = map[string]bool{}
			if doms, err := drv.ListDomains(ctx); err == nil {
				for _, d := range doms {
					running[d.Name] = true
				}
			}
		}
		var removed []string
		sbs, _ := os.ReadDir(sandbox.SandboxesDir(dir))
		for _, sb := range sbs {
			dom := sandbox.DomainPrefix + sb.Name()
			if err := drv.DestroyDomain(ctx, dom); err == nil && running[dom] {
				removed = append(removed, "domain "+dom)
			}
		}
		if rt := runtimeDirOf(dir, name); rt != "" {
			if _, err := os.Stat(rt); err == nil && os.RemoveAll(rt) == nil {
				removed = append(removed, "runtime dir "+rt)
			}
		}
		if err := os.RemoveAll(dir); err == nil {
			removed = append(removed, "dir "+dir)
		}
		lock.Close()
		lines = append(lines, fmt.Sprintf("removed what the in-process run %s left behind (its process is gone): %s", strings.TrimPrefix(name, newPfx), strings.Join(removed, ", ")))
	}
	return lines
}

// tryLock opens and flocks path without waiting; ok is false when the
// file is missing or another process holds it.
func tryLock(path string) (*os.File, bool) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// runtimeDirOf reads the runtime dir recorded in run directory dir (named
// name), or "" when there is none or it is not a run's ("local-ID"): a
// sweep removes nothing else.
func runtimeDirOf(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, runtimeFile))
	if err != nil {
		return ""
	}
	rt := strings.TrimSpace(string(b))
	if !filepath.IsAbs(rt) || !strings.HasPrefix(filepath.Base(rt), runtimePfx) {
		return ""
	}
	if id := strings.TrimPrefix(filepath.Base(rt), runtimePfx); !strings.HasPrefix(name, newPfx) && id != name {
		return ""
	}
	return rt
}
