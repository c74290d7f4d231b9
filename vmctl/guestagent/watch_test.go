package guestagent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
)

// watchEvents reads a watcher's events in a goroutine, for tests that wait
// for a given sequence.
type watchEvents struct {
	t   *testing.T
	w   *agent.Watcher
	ch  chan agentproto.WatchEvent
	err chan error
}

func startWatch(t *testing.T, c *agent.Client, p string, recursive bool) *watchEvents {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	w, err := c.Watch(ctx, agentproto.WatchRequest{Path: p, Recursive: recursive})
	if err != nil {
		t.Fatalf("Watch(%s): %v", p, err)
	}
	t.Cleanup(func() { w.Close() })
	we := &watchEvents{t: t, w: w, ch: make(chan agentproto.WatchEvent, 1<<16), err: make(chan error, 1)}
	go func() {
		for {
			batch, err := w.Next()
			if err != nil {
				we.err <- err
				close(we.ch)
				return
			}
			for _, ev := range batch {
				we.ch <- ev
			}
		}
	}()
	return we
}

// next returns the next event, failing the test after 20 s.
func (we *watchEvents) next() agentproto.WatchEvent {
	we.t.Helper()
	select {
	case ev, ok := <-we.ch:
		if !ok {
			we.t.Fatalf("watch ended: %v", <-we.err)
		}
		return ev
	case <-time.After(20 * time.Second):
		we.t.Fatal("no watch event within 20 s")
	}
	return agentproto.WatchEvent{}
}

// line renders an event as the CLI prints it: "OP PATH[ -> TO]".
func line(ev agentproto.WatchEvent) string {
	if ev.To != "" {
		return fmt.Sprintf("%s %s -> %s", ev.Op, ev.Path, ev.To)
	}
	return fmt.Sprintf("%s %s", ev.Op, ev.Path)
}

// expect reads len(want) events and compares them as lines.
func (we *watchEvents) expect(want ...string) []agentproto.WatchEvent {
	we.t.Helper()
	var got []agentproto.WatchEvent
	for range want {
		got = append(got, we.next())
	}
	var lines []string
	for _, ev := range got {
		lines = append(lines, line(ev))
	}
	if !slices.Equal(lines, want) {
		we.t.Fatalf("events:\n  got  %q\n  want %q", lines, want)
	}
	return got
}

// quiet checks that no event arrives for a while.
func (we *watchEvents) quiet() {
	we.t.Helper()
	select {
	case ev, ok := <-we.ch:
		if ok {
			we.t.Fatalf("unexpected event %s", line(ev))
		}
	case <-time.After(100 * time.Millisecond):
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestWatchSequence is the user's story: each change is one step, and each
// step's events are exactly these, in order.
func TestWatchSequence(t *testing.T) {
	c, _ := newClient(t)
	dir := t.TempDir()
	we := startWatch(t, c, dir, true)
	a, b := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")

	f, err := os.OpenFile(a, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	must(t, err)
	ev := we.expect("CREATE " + a)
	if ev[0].Info == nil || ev[0].Info.Type != agentproto.TypeFile || ev[0].Info.Size != 0 {
		t.Fatalf("CREATE info %+v", ev[0].Info)
	}
	_, err = f.Write([]byte("hello\n"))
	must(t, err)
	ev = we.expect("WRITE " + a)
	if ev[0].Info == nil || ev[0].Info.Size != 6 {
		t.Fatalf("WRITE info %+v", ev[0].Info)
	}
	must(t, f.Close())
	must(t, os.Rename(a, b))
	ev = we.expect("RENAME " + a + " -> " + b)
	if ev[0].Info == nil || ev[0].Info.Name != "b.txt" || ev[0].Info.Size != 6 {
		t.Fatalf("RENAME info %+v", ev[0].Info)
	}
	must(t, os.Chmod(b, 0o600))
	ev = we.expect("CHMOD " + b)
	if ev[0].Info == nil || ev[0].Info.Mode.Perm() != 0o600 {
		t.Fatalf("CHMOD info %+v", ev[0].Info)
	}
	must(t, os.Remove(b))
	ev = we.expect("REMOVE " + b)
	if ev[0].Info != nil {
		t.Fatalf("REMOVE has info %+v", ev[0].Info)
	}

	// A new directory is watched before its CREATE is sent.
	sub := filepath.Join(dir, "sub")
	must(t, os.Mkdir(sub, 0o755))
	ev = we.expect("CREATE " + sub)
	if ev[0].Info == nil || ev[0].Info.Type != agentproto.TypeDir {
		t.Fatalf("CREATE dir info %+v", ev[0].Info)
	}
	c1 := filepath.Join(sub, "c.txt")
	must(t, os.WriteFile(c1, []byte("x\n"), 0o644))
	we.expect("CREATE "+c1, "WRITE "+c1)
	we.quiet()
}

// TestWatchNewTreeScanned: entries made in a new directory before its
// watch was added are reported (scan), each exactly once.
func TestWatchNewTreeScanned(t *testing.T) {
	c, _ := newClient(t)
	dir := t.TempDir()
	we := startWatch(t, c, dir, true)
	for round := range 20 {
		top := filepath.Join(dir, fmt.Sprint("d", round))
		deep := filepath.Join(top, "e", "f")
		must(t, os.MkdirAll(deep, 0o755))
		must(t, os.WriteFile(filepath.Join(deep, "x"), nil, 0o644))
		// The marker is made once everything above was reported or not.
		marker := filepath.Join(dir, fmt.Sprint("m", round))
		must(t, os.WriteFile(marker, nil, 0o644))
		seen := map[string]int{}
		for {
			ev := we.next()
			if ev.Path == marker {
				break
			}
			if ev.Op != agentproto.WatchCreate {
				t.Fatalf("round %d: unexpected %s", round, line(ev))
			}
			seen[ev.Path]++
		}
		want := map[string]int{top: 1, filepath.Join(top, "e"): 1, deep: 1, filepath.Join(deep, "x"): 1}
		if fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Fatalf("round %d: CREATE counts %v, want %v", round, seen, want)
		}
		// The deepest directory is watched too.
		y := filepath.Join(deep, "y")
		must(t, os.WriteFile(y, nil, 0o644))
		we.expect("CREATE " + y)
	}
}

// TestWatchNotRecursive reports a directory's own entries only.
func TestWatchNotRecursive(t *testing.T) {
	c, _ := newClient(t)
	dir := t.TempDir()
	we := startWatch(t, c, dir, false)
	sub := filepath.Join(dir, "sub")
	must(t, os.Mkdir(sub, 0o755))
	must(t, os.WriteFile(filepath.Join(sub, "in"), nil, 0o644))
	top := filepath.Join(dir, "top")
	must(t, os.WriteFile(top, nil, 0o644))
	we.expect("CREATE "+sub, "CREATE "+top)
}

// TestWatchMoves: a directory renamed within the tree keeps being watched
// under its new name; moved out, it is no longer watched; moved in, it is
// reported with its content.
func TestWatchMoves(t *testing.T) {
	c, _ := newClient(t)
	dir, outside := t.TempDir(), t.TempDir()
	d1, d2 := filepath.Join(dir, "d1"), filepath.Join(dir, "d2")
	must(t, os.Mkdir(d1, 0o755))
	we := startWatch(t, c, dir, true)

	must(t, os.Rename(d1, d2))
	we.expect("RENAME " + d1 + " -> " + d2)
	f := filepath.Join(d2, "f")
	must(t, os.WriteFile(f, nil, 0o644))
	we.expect("CREATE " + f)

	out := filepath.Join(outside, "d2")
	must(t, os.Rename(d2, out))
	we.expect("RENAME " + d2)
	must(t, os.WriteFile(filepath.Join(out, "g"), nil, 0o644))
	marker := filepath.Join(dir, "marker")
	must(t, os.WriteFile(marker, nil, 0o644))
	we.expect("CREATE " + marker) // nothing from the moved-out directory

	must(t, os.Rename(out, d1))
	we.expect("CREATE "+d1, "CREATE "+filepath.Join(d1, "f"), "CREATE "+filepath.Join(d1, "g"))
}

// TestWatchFile watches a single file; its removal ends the watch.
func TestWatchFile(t *testing.T) {
	c, _ := newClient(t)
	p := filepath.Join(t.TempDir(), "f")
	must(t, os.WriteFile(p, nil, 0o644))
	we := startWatch(t, c, p, true)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.Write([]byte("1"))
	must(t, err)
	must(t, f.Close())
	we.expect("WRITE " + p)
	must(t, os.Remove(p))
	we.expect("CHMOD "+p, "REMOVE "+p) // the link count changes first
	select {
	case _, ok := <-we.ch:
		if ok {
			t.Fatal("event after the watched file's REMOVE")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the watch did not end")
	}
	if err := <-we.err; err != io.EOF {
		t.Fatalf("Next after the end: %v, want io.EOF", err)
	}
}

// TestWatchRootRemoved: removing the watched directory reports its
// entries and itself, then ends the watch.
func TestWatchRootRemoved(t *testing.T) {
	c, _ := newClient(t)
	dir := filepath.Join(t.TempDir(), "w")
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "sub", "f"), nil, 0o644))
	we := startWatch(t, c, dir, true)
	must(t, os.RemoveAll(dir))
	we.expect("REMOVE "+filepath.Join(dir, "sub", "f"), "REMOVE "+filepath.Join(dir, "sub"), "REMOVE "+dir)
	if _, ok := <-we.ch; ok {
		t.Fatal("event after the root's REMOVE")
	}
	if err := <-we.err; err != io.EOF {
		t.Fatalf("Next after the end: %v, want io.EOF", err)
	}
}

// TestWatchMissing: a path that does not exist is a clear not-found error
// before any event.
func TestWatchMissing(t *testing.T) {
	c, _ := newClient(t)
	p := filepath.Join(t.TempDir(), "missing")
	_, err := c.Watch(context.Background(), agentproto.WatchRequest{Path: p, Recursive: true})
	var pe *agentproto.Error
	if !errors.As(err, &pe) || pe.Code != agentproto.CodeNotFound || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Watch of a missing path: %v", err)
	}
	if want := "watch " + p + ": no such file or directory"; pe.Message != want {
		t.Fatalf("message %q, want %q", pe.Message, want)
	}
	_, err = c.Watch(context.Background(), agentproto.WatchRequest{Path: "rel"})
	if !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("Watch of a relative path: %v", err)
	}
	// The session still serves.
	if _, err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// inotifyFds counts this process's inotify instances.
func inotifyFds(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// TestWatchClose: the host's Close ends the guest's watch and frees its
// inotify instance, also when the guest is blocked sending to a host that
// stopped reading.
func TestWatchClose(t *testing.T) {
	c, _ := newClient(t)
	before := inotifyFds(t)
	dir := t.TempDir()
	w, err := c.Watch(context.Background(), agentproto.WatchRequest{Path: dir})
	must(t, err)
	if inotifyFds(t) != before+1 {
		t.Fatalf("inotify fds: %d, want %d", inotifyFds(t), before+1)
	}
	// Far more than the stream window holds: the guest blocks sending.
	for i := range 30000 {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o644))
	}
	w.Close()
	if _, err := w.Next(); !errors.Is(err, agent.ErrWatchClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	testenv.WaitFor(t, 20*time.Second, "the guest's inotify fd closed", func() bool { return inotifyFds(t) == before })
}

// TestWatchCancel: the watch's ctx ends Next.
func TestWatchCancel(t *testing.T) {
	c, _ := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, agentproto.WatchRequest{Path: t.TempDir()})
	must(t, err)
	defer w.Close()
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := w.Next(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel: %v", err)
	}
}

// TestWatchOverflow: when the guest's inotify queue overflows (the host
// does not read), the host gets an explicit OVERFLOW event, and the watch
// goes on.
func TestWatchOverflow(t *testing.T) {
	c, _ := newClient(t)
	dir := t.TempDir()
	w, err := c.Watch(context.Background(), agentproto.WatchRequest{Path: dir, Recursive: true})
	must(t, err)
	defer w.Close()
	// 60 000 events: more than the stream window (~20 000 events) and
	// the kernel's queue (fs.inotify.max_queued_events, 16384 by default)
	// hold together, while nobody reads.
	const n = 30000
	for i := range n {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), []byte("x"), 0o644))
	}
	// The OVERFLOW event is the last of the kernel's full queue: once it
	// arrived, the queue has room, and a new change is seen again.
	var overflow, creates int
	for overflow == 0 {
		batch, err := w.Next()
		must(t, err)
		for _, ev := range batch {
			switch ev.Op {
			case agentproto.WatchOverflow:
				if ev.Path != dir || ev.Info != nil {
					t.Fatalf("overflow event %+v", ev)
				}
				overflow++
			case agentproto.WatchCreate:
				creates++
			}
		}
	}
	if creates >= n {
		t.Fatalf("%d of %d creates delivered with an overflow", creates, n)
	}
	marker := filepath.Join(dir, "marker")
	must(t, os.WriteFile(marker, nil, 0o644))
	for seen := false; !seen; {
		batch, err := w.Next()
		must(t, err)
		for _, ev := range batch {
			seen = seen || ev.Op == agentproto.WatchCreate && ev.Path == marker
		}
	}
	t.Logf("%d overflow events, %d of %d creates delivered", overflow, creates, n)
}

// TestWatchConcurrent: several watches of one session are independent.
func TestWatchConcurrent(t *testing.T) {
	c, _ := newClient(t)
	var wes []*watchEvents
	var dirs []string
	for range 4 {
		d := t.TempDir()
		dirs = append(dirs, d)
		wes = append(wes, startWatch(t, c, d, false))
	}
	for i, d := range dirs {
		must(t, os.WriteFile(filepath.Join(d, "f"), nil, 0o644))
		wes[i].expect("CREATE " + filepath.Join(d, "f"))
	}
}

// BenchmarkWatchLatency measures the time from a write(2) in the "guest"
// (here: the test process, the agent served over a socket pair) to its
// WRITE event at the host client; it reports p50 and p99.
func BenchmarkWatchLatency(b *testing.B) {
	c, _ := newClientOpts(b, guestagent.Options{})
	dir := b.TempDir()
	w, err := c.Watch(context.Background(), agentproto.WatchRequest{Path: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := w.Next(); err != nil { // its CREATE
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := f.Write([]byte("x")); err != nil {
			b.Fatal(err)
		}
		batch, err := w.Next()
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if batch[0].Op != agentproto.WatchWrite {
			b.Fatalf("got %s", line(batch[0]))
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// TestWatchLargeTreeMovedIn: a directory moved into a recursive watch is
// scanned and each of its entries reported as CREATE; thousands of them
// (here well over a frame's MaxPayload of JSON) arrive in several frames,
// all of them, and the watch goes on.
func TestWatchLargeTreeMovedIn(t *testing.T) {
	c, _ := newClient(t)
	dir, outside := t.TempDir(), t.TempDir()
	big := filepath.Join(outside, "big")
	must(t, os.Mkdir(big, 0o755))
	const files = 5000
	long := fmt.Sprintf("%0200d", 0) // ~5000 × 400 bytes of JSON: ~2 MiB
	want := map[string]bool{}
	for i := range files {
		name := fmt.Sprintf("f%05d-%s", i, long)
		must(t, os.WriteFile(filepath.Join(big, name), nil, 0o644))
		want[filepath.Join(dir, "big", name)] = true
	}
	we := startWatch(t, c, dir, true)
	in := filepath.Join(dir, "big")
	must(t, os.Rename(big, in))
	we.expect("CREATE " + in)
	for range files {
		ev := we.next()
		if ev.Op != agentproto.WatchCreate || !want[ev.Path] {
			t.Fatalf("unexpected %s", line(ev))
		}
		delete(want, ev.Path)
	}
	marker := filepath.Join(in, "marker")
	must(t, os.WriteFile(marker, nil, 0o644))
	we.expect("CREATE " + marker)
}
