package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// FileName is the name of the active log file in the log's directory;
// rotated files add ".1", ".2", … (see the package documentation).
const FileName = "audit.jsonl"

// Defaults of Options.
const (
	DefaultMaxBytes = 64 << 20 // 64 MiB
	DefaultMaxFiles = 10
)

// ErrClosed is returned by Append, Sync and Read after Close. It is of
// errdefs.ErrInternal: a read of the log (GET /v1/audit) racing the
// daemon's shutdown has always been answered 500 internal.
var ErrClosed = errdefs.New(errdefs.ErrInternal, "", "audit log is closed")

// Options tunes Open.
type Options struct {
	// MaxBytes is the most bytes the active file may hold: an append that
	// would exceed it rotates first. ≤ 0 means DefaultMaxBytes (64 MiB).
	MaxBytes int64
	// MaxFiles is how many rotated files are kept; the oldest beyond it is
	// deleted. ≤ 0 means DefaultMaxFiles (10). The log so holds at most
	// about MaxBytes × (MaxFiles+1) bytes.
	MaxFiles int
	// Logger receives warnings (repaired tails, skipped lines, failed
	// rotations). Nil discards them.
	Logger *slog.Logger
}

// Log is an append-only audit log in one directory. It is safe for
// concurrent use.
type Log struct {
	dir      string
	maxBytes int64
	maxFiles int
	log      *slog.Logger

	guest guestLimiter // AppendGuest's rate limit (guest.go)

	mu     sync.Mutex
	f      *os.File // the active file; nil after a failed reopen
	size   int64    // bytes in the active file
	closed bool
}

// Open opens the log in dir, creating dir (mode 0700) and the active file
// (mode 0600) if needed. A torn last line left by a crash is repaired (see
// the package documentation), and rotated files beyond opts.MaxFiles are
// deleted. Only one Log may be open on a directory at a time; the daemon's
// state-store lock guarantees it.
func Open(dir string, opts Options) (*Log, error) {
	l := &Log{dir: dir, maxBytes: opts.MaxBytes, maxFiles: opts.MaxFiles, log: opts.Logger}
	if l.maxBytes <= 0 {
		l.maxBytes = DefaultMaxBytes
	}
	if l.maxFiles <= 0 {
		l.maxFiles = DefaultMaxFiles
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	if err := l.openActive(); err != nil {
		return nil, err
	}
	if err := l.repairTail(); err != nil {
		_ = l.f.Close()
		return nil, err
	}
	rotated, err := l.rotated()
	if err != nil {
		_ = l.f.Close()
		return nil, err
	}
	for _, n := range rotated {
		if n > l.maxFiles {
			if err := os.Remove(l.rotatedPath(n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				l.log.Warn("audit: cannot delete a rotated file beyond MaxFiles", "file", l.rotatedPath(n), "err", err)
			}
		}
	}
	return l, nil
}

func (l *Log) activePath() string       { return filepath.Join(l.dir, FileName) }
func (l *Log) rotatedPath(n int) string { return filepath.Join(l.dir, FileName+"."+strconv.Itoa(n)) }

// openActive opens (creating) the active file and notes its size.
func (l *Log) openActive() error {
	f, err := os.OpenFile(l.activePath(), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// repairTail makes the active file end with a newline: a last line that
// is a whole entry gets its newline, anything else after the last newline
// (the torn start of an entry) is cut off.
func (l *Log) repairTail() error {
	if l.size == 0 {
		return nil
	}
	tailStart, err := lastLineStart(l.f, l.size)
	if err != nil {
		return fmt.Errorf("audit log: read %s: %w", l.activePath(), err)
	}
	if tailStart == l.size {
		return nil // ends with a newline
	}
	tail := make([]byte, l.size-tailStart)
	if _, err := l.f.ReadAt(tail, tailStart); err != nil {
		return fmt.Errorf("audit log: read %s: %w", l.activePath(), err)
	}
	if _, err := decodeLine(tail); err == nil {
		n, err := l.f.Write([]byte{'\n'})
		l.size += int64(n)
		if err != nil {
			return fmt.Errorf("audit log: repair %s: %w", l.activePath(), err)
		}
		return nil
	}
	if err := l.f.Truncate(tailStart); err != nil {
		return fmt.Errorf("audit log: cut the torn last line of %s: %w", l.activePath(), err)
	}
	l.log.Warn("audit: cut off a torn last line (the daemon or host crashed while writing it)",
		"file", l.activePath(), "bytes", l.size-tailStart)
	l.size = tailStart
	return nil
}

// lastLineStart returns the offset just after the last '\n' in the first
// size bytes of f (0 if there is none; size if f ends with '\n').
func lastLineStart(f *os.File, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	end := size
	for end > 0 {
		start := max(0, end-int64(len(buf)))
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}

// rotated returns the numbers of the rotated files present, ascending
// (newest first).
func (l *Log) rotated() ([]int, error) {
	return rotatedIn(l.dir)
}

func rotatedIn(dir string) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	var ns []int
	for _, e := range ents {
		suffix, ok := strings.CutPrefix(e.Name(), FileName+".")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(suffix)
		if err != nil || n < 1 || strconv.Itoa(n) != suffix || !e.Type().IsRegular() {
			continue
		}
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns, nil
}

// Append writes e as one line. A zero e.Time becomes the current time;
// every time is stored in UTC. If the active file would grow beyond
// MaxBytes, the log rotates first; a failed rotation is logged and the
// entry still goes into the active file (the trail matters more than its
// size). Errors: ErrClosed; an e.Args value that cannot be encoded as
// JSON; a failed write (disk full).
func (l *Log) Append(e Entry) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	line, err := encodeLine(e)
	if err != nil {
		return err
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.f == nil {
		if err := l.openActive(); err != nil {
			return err
		}
	}
	if l.size > 0 && l.size+int64(len(line)) > l.maxBytes {
		l.rotate()
		if l.f == nil {
			return fmt.Errorf("audit log: no active file after rotation; check %s", l.dir)
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	if err != nil {
		return fmt.Errorf("audit log: append to %s: %w", l.activePath(), err)
	}
	return nil
}

// encodeLine returns e as a line of the log: its JSON (HTML characters
// not escaped) and a newline.
func encodeLine(e Entry) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil { // Encode ends the line with '\n'
		return nil, fmt.Errorf("audit log: encode %s entry: %w", e.Action, err)
	}
	return buf.Bytes(), nil
}

// rotate shifts the rotated files up by one, deleting the one that would
// pass MaxFiles, moves the active file to .1 and starts a new one. Called
// with mu held. Errors are logged; l.f is nil only if no active file could
// be opened at all.
func (l *Log) rotate() {
	if err := l.f.Close(); err != nil {
		l.log.Warn("audit: close before rotation", "file", l.activePath(), "err", err)
	}
	l.f = nil
	ns, err := l.rotated()
	if err != nil {
		l.log.Error("audit: rotation failed; the active file keeps growing", "err", err)
	} else {
		// Descending, so each target name is free when it is renamed to.
		for _, n := range slices.Backward(ns) {
			if n >= l.maxFiles {
				err = os.Remove(l.rotatedPath(n))
			} else {
				err = os.Rename(l.rotatedPath(n), l.rotatedPath(n+1))
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			err = os.Rename(l.activePath(), l.rotatedPath(1))
		}
		if err != nil {
			l.log.Error("audit: rotation failed; the active file keeps growing", "dir", l.dir, "err", err)
		}
	}
	if err := l.openActive(); err != nil {
		l.log.Error("audit: cannot open the active file after rotation", "err", err)
	}
}

// Sync flushes the active file to disk (fsync). Errors: ErrClosed.
func (l *Log) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.f == nil {
		return nil
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("audit log: sync %s: %w", l.activePath(), err)
	}
	return nil
}

// Close appends the ActionGuestDropped entries still owed (AppendGuest),
// then flushes and closes the log; later Appends fail with ErrClosed.
// Reads already under way finish. Calls after the first return nil.
func (l *Log) Close() error {
	var errs []error
	for _, e := range l.guest.pending() {
		if err := l.Append(e); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	if err := l.close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// close is Close without the owed summaries.
func (l *Log) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	err := errors.Join(f.Sync(), f.Close())
	if err != nil {
		return fmt.Errorf("audit log: close %s: %w", l.activePath(), err)
	}
	return nil
}

// Filter selects entries for Read. Its zero value selects all.
type Filter struct {
	// Sandbox, if not "", keeps only that sandbox's entries.
	Sandbox string
	// Since, if not zero, keeps only entries with Time at or after it.
	Since time.Time
	// Actions, if not empty, keeps only entries with one of these actions.
	Actions []string
}

// Match reports whether e passes the filter.
func (f Filter) Match(e Entry) bool {
	if f.Sandbox != "" && e.Sandbox != f.Sandbox {
		return false
	}
	if !f.Since.IsZero() && e.Time.Before(f.Since) {
		return false
	}
	if len(f.Actions) > 0 && !slices.Contains(f.Actions, e.Action) {
		return false
	}
	return true
}

// Read sends the entries that match filter to emit, oldest file first and
// in each file in append order, and stops at the first error emit returns
// (which Read returns as is). It reads a snapshot: the files as they were
// when Read began (appends and rotations during the read are not seen),
// and it holds the log's lock only to take that snapshot, so a slow emit
// does not hold up appends. Lines that are not entries are skipped and
// logged (see the package documentation). Errors: ErrClosed; I/O errors.
func (l *Log) Read(filter Filter, emit func(Entry) error) error {
	srcs, err := l.snapshot()
	if err != nil {
		return err
	}
	defer closeSources(srcs)
	_, err = readSources(srcs, filter, emit, l.log)
	return err
}

// ReadDir reads the log in dir without opening it for appends, for tools
// that inspect a log whose daemon is not running: like Read, except that
// it sees the files as they are (a torn last line is skipped, not
// repaired). A missing directory holds no entries.
func ReadDir(dir string, filter Filter, emit func(Entry) error, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	srcs, err := openSources(dir, -1)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer closeSources(srcs)
	_, err = readSources(srcs, filter, emit, logger)
	return err
}

// source is one open file of a snapshot, read up to size bytes (-1: to
// its end).
type source struct {
	f    *os.File
	size int64
}

// snapshot opens every file of the log under the lock. Open descriptors
// stay readable when a later rotation renames or deletes their files.
func (l *Log) snapshot() ([]source, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	return openSources(l.dir, l.size)
}

// openSources opens the rotated files oldest first, then the active one,
// whose reads stop at activeSize (-1: its end).
func openSources(dir string, activeSize int64) ([]source, error) {
	ns, err := rotatedIn(dir)
	if err != nil {
		return nil, err
	}
	var srcs []source
	add := func(path string, size int64) error {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		srcs = append(srcs, source{f: f, size: size})
		return nil
	}
	for _, n := range slices.Backward(ns) {
		if err := add(filepath.Join(dir, FileName+"."+strconv.Itoa(n)), -1); err != nil {
			closeSources(srcs)
			return nil, err
		}
	}
	if err := add(filepath.Join(dir, FileName), activeSize); err != nil {
		closeSources(srcs)
		return nil, err
	}
	return srcs, nil
}

func closeSources(srcs []source) {
	for _, s := range srcs {
		_ = s.f.Close()
	}
}

// readStats counts what a read saw.
type readStats struct {
	entries int // lines decoded (matching or not)
	corrupt int // lines skipped because they are not entries
	torn    int // last lines skipped because they lack their newline
}

func readSources(srcs []source, filter Filter, emit func(Entry) error, log *slog.Logger) (readStats, error) {
	var st readStats
	for _, s := range srcs {
		var r io.Reader = s.f
		if s.size >= 0 {
			r = io.LimitReader(s.f, s.size)
		}
		if err := readFile(r, s.f.Name(), filter, emit, log, &st); err != nil {
			return st, err
		}
	}
	return st, nil
}

func readFile(r io.Reader, name string, filter Filter, emit func(Entry) error, log *slog.Logger, st *readStats) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				st.torn++
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("audit log: read %s: %w", name, err)
		}
		line = line[:len(line)-1]
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		e, err := decodeLine(line)
		if err != nil {
			st.corrupt++
			log.Warn("audit: skipped a line that is not an entry", "file", name, "line", lineNo, "err", err)
			continue
		}
		st.entries++
		if !filter.Match(e) {
			continue
		}
		if err := emit(e); err != nil {
			return err
		}
	}
}

// decodeLine decodes one line (without its newline) as an Entry. A line
// must be a JSON object with an action.
func decodeLine(line []byte) (Entry, error) {
	var e Entry
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return e, errors.New("not a JSON object")
	}
	if err := json.Unmarshal(line, &e); err != nil {
		return e, err
	}
	if e.Action == "" {
		return e, errors.New("no action")
	}
	return e, nil
}
