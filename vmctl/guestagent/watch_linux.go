package guestagent

// File watching (OpWatch) on inotify, used directly through
// golang.org/x/sys/unix rather than through fsnotify; DESIGN.md says why.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

const (
	// watchMask is what every watch asks the kernel for: the changes a
	// user sees (agentproto.WatchOp) and the watched path's own end.
	watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE |
		unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	// subdirMask is watchMask for the directories below the root of a
	// recursive watch: never through a symbolic link, and only if it is
	// still a directory (it may have been replaced since it was seen).
	subdirMask = watchMask | unix.IN_DONT_FOLLOW | unix.IN_ONLYDIR
	// settleWait is how long the reader waits for the next event when
	// one may complete what it holds: the MOVED_TO of a held MOVED_FROM,
	// or the CREATE events a directory scan already reported.
	settleWait = 10 * time.Millisecond
	// watchReadSize is the inotify read buffer: ~2000 events with short
	// names per read.
	watchReadSize = 64 << 10
)

// heldMove is a MOVED_FROM waiting for the MOVED_TO with its cookie.
type heldMove struct {
	path   string
	cookie uint32
	dir    bool
}

// watcher is one OpWatch: an inotify instance, the directories it
// watches and the events not yet sent.
type watcher struct {
	f         *os.File // the inotify fd, non-blocking, in Go's poller
	rc        syscall.RawConn
	root      string
	rootWd    int32
	recursive bool
	fw        *agentproto.Writer
	buf       []byte

	// paths maps each watch descriptor to the directory (or, for a file
	// root, the file) it watches.
	paths map[int32]string
	// held is a MOVED_FROM whose MOVED_TO may follow.
	held *heldMove
	// scanned holds the paths a directory scan reported as CREATE whose
	// own IN_CREATE may still be queued (the entry appeared between the
	// new watch and the scan); such an IN_CREATE is dropped once. It is
	// cleared when the queue runs dry: every such event was queued before
	// the scan ended.
	scanned map[string]bool
	batch   []agentproto.WatchEvent
	// ended is set once the watched path itself went away.
	ended bool
}

// watch handles OpWatch; see agentproto.OpWatch for the frames. It returns
// nil when the host closed its side or the watched path went away (the
// stream then ends with FrameDataEnd); other errors are sent as FrameError
// by the caller.
func (s *server) watch(st io.Closer, fr *agentproto.Reader, fw *agentproto.Writer, req *agentproto.WatchRequest) error {
	root, err := agentproto.CleanPath(req.Path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return watchPathError(root, err)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("watch %s: inotify_init1: %w", root, err)
	}
	w := &watcher{
		f: os.NewFile(uintptr(fd), "inotify"), root: root, recursive: req.Recursive && fi.IsDir(), fw: fw,
		buf: make([]byte, watchReadSize), paths: map[int32]string{}, scanned: map[string]bool{},
	}
	var closeOnce sync.Once
	var hostGone atomic.Bool
	stop := func() { closeOnce.Do(func() { w.f.Close() }) }
	defer stop()
	if w.rc, err = w.f.SyscallConn(); err != nil {
		return fmt.Errorf("watch %s: %w", root, err)
	}
	wd, err := w.add(root, watchMask)
	if err != nil {
		return watchPathError(root, err)
	}
	w.rootWd = wd
	if w.recursive {
		if err := w.addTree(root, false); err != nil {
			return err
		}
	}
	if err := fw.WriteJSON(agentproto.FrameResponse, agentproto.WatchStarted{Dirs: len(w.paths)}); err != nil {
		return err
	}

	// The host sends nothing more; the end of its side ends the watch.
	// Closing the inotify fd wakes the reader, closing the stream a send
	// blocked on a host that no longer reads.
	go func() {
		for {
			if _, _, err := fr.ReadFrame(); err != nil {
				break
			}
		}
		hostGone.Store(true)
		stop()
		st.Close()
	}()
	if err := w.run(); err != nil && !hostGone.Load() {
		return err
	}
	return nil
}

// watchPathError makes the error of a path that cannot be watched say so.
func watchPathError(root string, err error) error {
	pe := toProtoError(err)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		pe.Message = fmt.Sprintf("watch %s: no such file or directory", root)
	} else if errors.Is(err, syscall.ENOSPC) {
		pe.Message = fmt.Sprintf("watch %s: the guest's inotify watch limit is reached (fs.inotify.max_user_watches)", root)
	}
	return pe
}

// run reads and reports events until the watch ends (nil) or a read or
// send fails (also when the host ended the watch: the fd or the stream was
// closed).
func (w *watcher) run() error {
	for !w.ended {
		wait := time.Duration(0) // block
		if w.held != nil || len(w.scanned) > 0 {
			wait = settleWait
		}
		if err := w.send(); err != nil {
			return err
		}
		n, err := w.read(wait)
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, unix.EAGAIN) {
			w.release()
			clear(w.scanned)
			continue
		}
		if err != nil {
			return err
		}
		if err := w.process(w.buf[:n]); err != nil {
			return err
		}
	}
	w.release()
	if err := w.send(); err != nil {
		return err
	}
	return w.fw.WriteFrame(agentproto.FrameDataEnd, nil)
}

// read reads events, waiting for them in Go's poller (no longer than wait
// if wait > 0). A wait that expires is retried once without waiting: the
// poller may report the deadline without trying read(2).
func (w *watcher) read(wait time.Duration) (int, error) {
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	if err := w.f.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err := w.rc.Read(func(fd uintptr) bool {
		n, rerr = unix.Read(int(fd), w.buf)
		return rerr != unix.EAGAIN
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if err := w.f.SetReadDeadline(time.Time{}); err != nil {
			return 0, err
		}
		err = w.rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), w.buf)
			return true
		})
	}
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	return n, nil
}

// add adds (or updates) the watch of p and records it.
func (w *watcher) add(p string, mask uint32) (int32, error) {
	var wd int
	var aerr error
	if err := w.rc.Control(func(fd uintptr) {
		wd, aerr = unix.InotifyAddWatch(int(fd), p, mask)
	}); err != nil {
		return 0, err
	}
	if aerr != nil {
		return 0, &fs.PathError{Op: "inotify_add_watch", Path: p, Err: aerr}
	}
	w.paths[int32(wd)] = p
	return int32(wd), nil
}

// addTree watches the directories below dir (dir itself is watched). With
// report, every entry found is reported as CREATE first: they appeared
// before their directory's watch, which is added before it is read.
func (w *watcher) addTree(dir string, report bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil // gone already: its REMOVE follows
		}
		return fmt.Errorf("watch: scan %s: %w", dir, err)
	}
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		if report {
			w.emit(agentproto.WatchCreate, p, "")
			w.scanned[p] = true
		}
		if !e.IsDir() {
			continue
		}
		if err := w.addDir(p, report); err != nil {
			return err
		}
	}
	return nil
}

// addDir watches the new directory p and the tree below it, reporting its
// entries with report. A directory gone or replaced meanwhile is skipped;
// only the watch limit is an error.
func (w *watcher) addDir(p string, report bool) error {
	if _, err := w.add(p, subdirMask); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return watchPathError(p, err)
		}
		return nil
	}
	return w.addTree(p, report)
}

// process turns one read's events into WatchEvents.
func (w *watcher) process(b []byte) error {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return fmt.Errorf("watch: short inotify event")
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")
		b = b[end:]
		if err := w.handle(ev.Wd, ev.Mask, ev.Cookie, name); err != nil {
			return err
		}
		if len(w.batch) >= agentproto.WatchBatch {
			if err := w.send(); err != nil {
				return err
			}
		}
	}
	return nil
}

// handle handles one inotify event.
func (w *watcher) handle(wd int32, mask, cookie uint32, name string) error {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.release()
		w.emit(agentproto.WatchOverflow, w.root, "")
		if w.recursive {
			// Directories created while events were lost have no watch.
			return w.addTree(w.root, false)
		}
		return nil
	}
	dir, ok := w.paths[wd]
	if !ok {
		return nil // a watch removed since (moved out, deleted)
	}
	if mask&unix.IN_IGNORED != 0 {
		delete(w.paths, wd)
		if wd == w.rootWd {
			w.ended = true // unmounted, or deleted (reported with DELETE_SELF)
		}
		return nil
	}
	if name == "" {
		// An event of the watched entry itself. Below the root, the
		// parent's watch reports it already.
		if wd != w.rootWd {
			return nil
		}
		switch {
		case mask&unix.IN_DELETE_SELF != 0:
			w.release()
			w.emit(agentproto.WatchRemove, w.root, "")
			w.ended = true
		case mask&unix.IN_MOVE_SELF != 0:
			w.release()
			w.emit(agentproto.WatchRename, w.root, "")
			w.ended = true
		case mask&unix.IN_MODIFY != 0:
			w.emit(agentproto.WatchWrite, w.root, "")
		case mask&unix.IN_ATTRIB != 0:
			w.emit(agentproto.WatchChmod, w.root, "")
		}
		return nil
	}
	p := path.Join(dir, name)
	isDir := mask&unix.IN_ISDIR != 0
	if w.held != nil && !(mask&unix.IN_MOVED_TO != 0 && cookie == w.held.cookie) {
		w.release()
	}
	switch {
	case mask&unix.IN_CREATE != 0:
		if w.scanned[p] {
			delete(w.scanned, p) // the scan reported it
			return nil
		}
		w.emit(agentproto.WatchCreate, p, "")
		if isDir && w.recursive {
			return w.addDir(p, true)
		}
	case mask&unix.IN_MODIFY != 0:
		w.emit(agentproto.WatchWrite, p, "")
	case mask&unix.IN_ATTRIB != 0:
		w.emit(agentproto.WatchChmod, p, "")
	case mask&unix.IN_DELETE != 0:
		delete(w.scanned, p)
		w.emit(agentproto.WatchRemove, p, "")
	case mask&unix.IN_MOVED_FROM != 0:
		delete(w.scanned, p)
		w.held = &heldMove{path: p, cookie: cookie, dir: isDir}
	case mask&unix.IN_MOVED_TO != 0:
		if h := w.held; h != nil {
			w.held = nil
			w.emit(agentproto.WatchRename, h.path, p)
			if h.dir && w.recursive {
				w.movePaths(h.path, p)
			}
			return nil
		}
		if w.scanned[p] {
			delete(w.scanned, p)
			return nil
		}
		w.emit(agentproto.WatchCreate, p, "") // moved in from outside
		if isDir && w.recursive {
			return w.addDir(p, true)
		}
	}
	return nil
}

// release reports a held MOVED_FROM whose MOVED_TO did not come: the
// entry left the watched tree, and so do the watches below it.
func (w *watcher) release() {
	h := w.held
	if h == nil {
		return
	}
	w.held = nil
	w.emit(agentproto.WatchRename, h.path, "")
	if !h.dir || !w.recursive {
		return
	}
	for wd, p := range w.paths {
		if wd != w.rootWd && under(p, h.path) {
			_ = w.rc.Control(func(fd uintptr) { _, _ = unix.InotifyRmWatch(int(fd), uint32(wd)) })
			delete(w.paths, wd)
		}
	}
}

// movePaths renames the watched directories at or below from to below to.
func (w *watcher) movePaths(from, to string) {
	for wd, p := range w.paths {
		if wd != w.rootWd && under(p, from) {
			w.paths[wd] = to + p[len(from):]
		}
	}
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// emit queues one event; the entry's info (at to for a rename) is read now.
func (w *watcher) emit(op agentproto.WatchOp, p, to string) {
	ev := agentproto.WatchEvent{Op: op, Path: p, To: to, TimeNs: time.Now().UnixNano()}
	at := p
	if to != "" {
		at = to
	}
	if op != agentproto.WatchRemove && op != agentproto.WatchOverflow && !(op == agentproto.WatchRename && to == "") {
		if fi, err := os.Lstat(at); err == nil {
			info := fileInfo(path.Base(at), fi)
			ev.Info = &info
		}
	}
	w.batch = append(w.batch, ev)
}

// watchFrameBytes bounds the JSON of one FrameData of events, far below
// agentproto.MaxPayload: one event is at most two paths of PATH_MAX
// (escaped, up to 6 bytes per byte) and its info.
const watchFrameBytes = 256 << 10

// send sends the queued events as FrameData frames of at most
// agentproto.WatchBatch events and watchFrameBytes bytes each: a directory
// scan (addTree) queues one event per entry it found, any number of them.
func (w *watcher) send() error {
	defer func() {
		clear(w.batch) // release the Info pointers
		w.batch = w.batch[:0]
	}()
	frame := make([]byte, 0, 4<<10)
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		err := w.fw.WriteFrame(agentproto.FrameData, append(frame, ']'))
		frame, n = frame[:0], 0
		return err
	}
	for _, ev := range w.batch {
		b, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("watch: encode event: %w", err)
		}
		if n == agentproto.WatchBatch || (n > 0 && len(frame)+1+len(b)+1 > watchFrameBytes) {
			if err := flush(); err != nil {
				return err
			}
		}
		if n == 0 {
			frame = append(frame, '[')
		} else {
			frame = append(frame, ',')
		}
		frame = append(frame, b...)
		n++
	}
	return flush()
}
