package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func intp(n int) *int { return &n }

var t0 = time.Date(2026, 11, 29, 14, 2, 11, 120_000_000, time.UTC)

func openLog(t *testing.T, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func readAll(t *testing.T, l *Log, f Filter) []Entry {
	t.Helper()
	var out []Entry
	if err := l.Read(f, func(e Entry) error { out = append(out, e); return nil }); err != nil {
		t.Fatalf("Read: %v", err)
	}
	return out
}

// readStatsOf reads dir like ReadDir and returns what it counted.
func readStatsOf(t *testing.T, dir string) ([]Entry, readStats) {
	t.Helper()
	srcs, err := openSources(dir, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer closeSources(srcs)
	var out []Entry
	st, err := readSources(srcs, Filter{}, func(e Entry) error { out = append(out, e); return nil }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return out, st
}

// sampleEntries uses JSON's own types in Args (string, float64, []any) so
// that what is read back is DeepEqual to what was appended.
func sampleEntries() []Entry {
	return []Entry{
		{Time: t0, Sandbox: "3f2a9c1b0d4e", Caller: "uid:0", Action: ActionCreate,
			Args:       map[string]any{"image": "debian-minimal", "vcpus": float64(1), "memory_mib": float64(256), "name": "work1"},
			DurationMs: 2100},
		{Time: t0.Add(2882 * time.Millisecond), Sandbox: "3f2a9c1b0d4e", Caller: "uid:0", Action: ActionExec,
			Args:   map[string]any{"cmd": []any{"python3", "-c", "print(1)"}, "cwd": "/work"},
			ExecID: "e000001", ExitCode: intp(0), DurationMs: 41, BytesOut: 2,
			Stdout: &OutputDigest{Bytes: 2, SHA256: "4355a46b19d348dc2f57c046f8ef63d4538ebb936000f3c9ee954a27460dd865", Head: "1\n"}},
		{Time: t0.Add(5 * time.Second), Sandbox: "aaaaaaaaaaaa", Caller: "token", Action: ActionDownload,
			Args: map[string]any{"path": "/etc/shadow"}, Error: "not_found", ErrorMessage: "no such file /etc/shadow: check the path",
			DurationMs: 3},
		{Time: t0.Add(time.Minute), Caller: "daemon", Action: ActionReconcile, Args: map[string]any{"reason": "adopted 2"}},
	}
}

func TestAppendReadRoundTrip(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	want := sampleEntries()
	for _, e := range want {
		if err := l.Append(e); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	got := readAll(t, l, Filter{})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Read after Append:\n got %#v\nwant %#v", got, want)
	}
}

func TestAppendLineFormat(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	local := time.FixedZone("CET", 3600)
	e := Entry{Time: time.Date(2026, 1, 2, 4, 5, 6, 7, local), Sandbox: "aaaaaaaaaaaa", Caller: "uid:1000", Action: ActionExec,
		Args: map[string]any{"cmd": []string{"sh", "-c", "a <b && c >d\n"}}}
	if err := l.Append(e); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"time":"2026-01-02T03:05:06.000000007Z","sandbox":"aaaaaaaaaaaa","caller":"uid:1000","action":"exec","args":{"cmd":["sh","-c","a <b && c >d\n"]},"duration_ms":0}` + "\n"
	if string(data) != want {
		t.Fatalf("file:\n got %s\nwant %s", data, want)
	}
}

func TestAppendDefaultsTime(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	before := time.Now().UTC()
	if err := l.Append(Entry{Caller: "daemon", Action: ActionReap}); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UTC()
	got := readAll(t, l, Filter{})
	if len(got) != 1 {
		t.Fatalf("%d entries, want 1", len(got))
	}
	if tm := got[0].Time; tm.Before(before.Truncate(time.Nanosecond)) || tm.After(after) || tm.Location() != time.UTC {
		t.Fatalf("default Time %v, want UTC between %v and %v", tm, before, after)
	}
}

func TestAppendUnencodable(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	err := l.Append(Entry{Action: ActionExec, Args: map[string]any{"ch": make(chan int)}})
	if err == nil || !strings.Contains(err.Error(), "encode exec entry") {
		t.Fatalf("Append with a channel arg: %v, want an encode error", err)
	}
	if got := readAll(t, l, Filter{}); len(got) != 0 {
		t.Fatalf("a failed append wrote %d entries", len(got))
	}
}

func TestConcurrentAppends(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	const writers, each = 16, 100
	pad := strings.Repeat("x", 3000) // lines of ~3 KiB: a torn or split write would show
	var wg sync.WaitGroup
	errs := make(chan error, writers*each+writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				err := l.Append(Entry{Sandbox: fmt.Sprintf("w%02d", w), Caller: "uid:0", Action: ActionExec,
					Args: map[string]any{"seq": float64(i), "pad": pad}})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	// Readers alongside the writers.
	for range 4 {
		wg.Go(func() {
			n := 0
			if err := l.Read(Filter{}, func(Entry) error { n++; return nil }); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent: %v", err)
	}

	f, err := os.Open(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	next := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	lines := 0
	for sc.Scan() {
		lines++
		var e Entry
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("line %d is not one entry: %v: %.80q", lines, err, sc.Text())
		}
		if e.Args["pad"] != pad {
			t.Fatalf("line %d: pad mangled", lines)
		}
		seq := int(e.Args["seq"].(float64))
		if seq != next[e.Sandbox] {
			t.Fatalf("line %d: writer %s seq %d, want %d (each writer's entries in its order)", lines, e.Sandbox, seq, next[e.Sandbox])
		}
		next[e.Sandbox]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines != writers*each {
		t.Fatalf("%d lines, want %d", lines, writers*each)
	}
}

// fixedEntry returns an entry whose line has the same length for every
// seq < 10000.
func fixedEntry(seq int) Entry {
	return Entry{Time: t0.Add(time.Duration(seq) * time.Second), Sandbox: "aaaaaaaaaaaa", Caller: "uid:0", Action: ActionExec,
		Args: map[string]any{"seq": fmt.Sprintf("%04d", seq)}}
}

func lineLen(t *testing.T, e Entry) int {
	t.Helper()
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return len(data) + 1
}

func seqs(es []Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Args["seq"].(string))
	}
	return out
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	n := lineLen(t, fixedEntry(0))
	const perFile, maxFiles, total = 4, 3, 50
	// Room for perFile lines and a bit, not for perFile+1.
	l := openLog(t, dir, Options{MaxBytes: int64(perFile*n + n/2), MaxFiles: maxFiles})
	for i := range total {
		if err := l.Append(fixedEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	// 50 = 12 full files + 2 in the active one; kept: 3 rotated + active.
	wantFiles := map[string]int{FileName: 2, FileName + ".1": 4, FileName + ".2": 4, FileName + ".3": 4}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(wantFiles) {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("files %v, want %d files", names, len(wantFiles))
	}
	for name, lines := range wantFiles {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Count(data, []byte("\n")); got != lines || len(data) != lines*n {
			t.Fatalf("%s: %d lines, %d bytes; want %d lines, %d bytes", name, got, len(data), lines, lines*n)
		}
		st, _ := os.Stat(filepath.Join(dir, name))
		if perm := st.Mode().Perm(); perm != 0o600 {
			t.Fatalf("%s mode %v, want 0600", name, perm)
		}
	}
	var want []string
	for i := total - 14; i < total; i++ {
		want = append(want, fmt.Sprintf("%04d", i))
	}
	if got := seqs(readAll(t, l, Filter{})); !reflect.DeepEqual(got, want) {
		t.Fatalf("Read across files = %v, want %v", got, want)
	}
	// .1 holds the entries just before the active file's.
	if got, _ := os.ReadFile(filepath.Join(dir, FileName+".1")); !bytes.Contains(got, []byte(`"seq":"0047"`)) {
		t.Fatalf("%s.1 does not end with seq 0047: %s", FileName, got)
	}
}

func TestRotationOversizedEntry(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{MaxBytes: 100, MaxFiles: 5})
	big := Entry{Time: t0, Caller: "uid:0", Action: ActionExec, Args: map[string]any{"seq": strings.Repeat("b", 500)}}
	for _, e := range []Entry{fixedEntry(1), big, fixedEntry(2)} {
		if err := l.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	// Each of them in a file of its own: .2, .1, active.
	for name, want := range map[string]string{FileName + ".2": `"0001"`, FileName + ".1": `"bbbb`, FileName: `"0002"`} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Count(data, []byte("\n")) != 1 || !bytes.Contains(data, []byte(want)) {
			t.Fatalf("%s = %s, want one line with %s", name, data, want)
		}
	}
}

func TestReopenContinues(t *testing.T) {
	dir := t.TempDir()
	n := lineLen(t, fixedEntry(0))
	opts := Options{MaxBytes: int64(3 * n), MaxFiles: 4}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 14 { // 4 full files + 2 lines
		if err := l.Append(fixedEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen with fewer files kept: the oldest go at once.
	opts.MaxFiles = 2
	l = openLog(t, dir, opts)
	if _, err := os.Stat(filepath.Join(dir, FileName+".3")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s.3 survived a reopen with MaxFiles 2: %v", FileName, err)
	}
	// The active file's size is known: one more line fits, the next rotates.
	for i := 14; i < 16; i++ {
		if err := l.Append(fixedEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"0009", "0010", "0011", "0012", "0013", "0014", "0015"}
	if got := seqs(readAll(t, l, Filter{})); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen: %v, want %v", got, want)
	}
}

func TestTornLastLine(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := l.Append(fixedEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	// A crash mid-write leaves half a line.
	full, _ := json.Marshal(fixedEntry(3))
	appendFile(t, filepath.Join(dir, FileName), full[:len(full)/2])

	got, st := readStatsOf(t, dir)
	if want := []string{"0000", "0001", "0002"}; !reflect.DeepEqual(seqs(got), want) || st.torn != 1 || st.corrupt != 0 {
		t.Fatalf("read of a torn log: %v, %+v; want %v, 1 torn, 0 corrupt", seqs(got), st, want)
	}
	var viaReadDir []Entry
	if err := ReadDir(dir, Filter{}, func(e Entry) error { viaReadDir = append(viaReadDir, e); return nil }, nil); err != nil {
		t.Fatalf("ReadDir of a torn log: %v", err)
	}
	if !reflect.DeepEqual(viaReadDir, got) {
		t.Fatalf("ReadDir = %v, want %v", seqs(viaReadDir), seqs(got))
	}

	// Open cuts the torn tail off (and says so); the next entry starts on
	// its own line.
	var logBuf bytes.Buffer
	l = openLog(t, dir, Options{Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	if !strings.Contains(logBuf.String(), "cut off a torn last line") || !strings.Contains(logBuf.String(), fmt.Sprintf("bytes=%d", len(full)/2)) {
		t.Fatalf("log after repair: %q", logBuf.String())
	}
	if err := l.Append(fixedEntry(4)); err != nil {
		t.Fatal(err)
	}
	if got, want := seqs(readAll(t, l, Filter{})), []string{"0000", "0001", "0002", "0004"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after repair: %v, want %v", got, want)
	}
	if _, st := readStatsOf(t, dir); st.corrupt != 0 || st.torn != 0 {
		t.Fatalf("after repair: %+v, want no corrupt or torn lines", st)
	}
}

func TestWholeLastLineWithoutNewlineKept(t *testing.T) {
	dir := t.TempDir()
	full, _ := json.Marshal(fixedEntry(7))
	if err := os.WriteFile(filepath.Join(dir, FileName), full, 0o600); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, dir, Options{})
	if err := l.Append(fixedEntry(8)); err != nil {
		t.Fatal(err)
	}
	if got, want := seqs(readAll(t, l, Filter{})), []string{"0007", "0008"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func appendFile(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptMiddleLineSkipped(t *testing.T) {
	dir := t.TempDir()
	var data []byte
	for i, line := range []string{"", "garbage{", "", `{"time":"2026-11-29T14:02:11Z","caller":"x"}`, "[1,2]", `{"action":`} {
		e, _ := json.Marshal(fixedEntry(i))
		data = append(data, e...)
		data = append(data, '\n')
		if line != "" {
			data = append(data, line+"\n"...)
		}
	}
	data = append(data, "\n  \n"...) // blank lines are not corrupt
	if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	l := openLog(t, dir, Options{Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	want := []string{"0000", "0001", "0002", "0003", "0004", "0005"}
	if got := seqs(readAll(t, l, Filter{})); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, st := readStatsOf(t, dir); st.corrupt != 4 || st.torn != 0 || st.entries != 6 {
		t.Fatalf("stats %+v, want 6 entries, 4 corrupt, 0 torn", st)
	}
	if c := strings.Count(logBuf.String(), "skipped a line that is not an entry"); c != 4 {
		t.Fatalf("%d warnings, want 4:\n%s", c, logBuf.String())
	}
	if !strings.Contains(logBuf.String(), "line=3 ") {
		t.Fatalf("warnings do not name line 3:\n%s", logBuf.String())
	}
}

func TestFilter(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	mk := func(sec int, sb, action string) Entry {
		return Entry{Time: t0.Add(time.Duration(sec) * time.Second), Sandbox: sb, Caller: "uid:0", Action: action}
	}
	all := []Entry{
		mk(0, "a", ActionCreate), mk(1, "b", ActionCreate), mk(2, "a", ActionExec),
		mk(3, "b", ActionExec), mk(4, "a", ActionUpload), mk(5, "", ActionReconcile), mk(6, "a", ActionRemove),
	}
	for _, e := range all {
		if err := l.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		filter Filter
		want   []int
	}{
		{"all", Filter{}, []int{0, 1, 2, 3, 4, 5, 6}},
		{"sandbox", Filter{Sandbox: "a"}, []int{0, 2, 4, 6}},
		{"actions", Filter{Actions: []string{ActionExec, ActionReconcile}}, []int{2, 3, 5}},
		{"since inclusive", Filter{Since: t0.Add(4 * time.Second)}, []int{4, 5, 6}},
		{"since in another zone", Filter{Since: t0.Add(4 * time.Second).In(time.FixedZone("X", -7200))}, []int{4, 5, 6}},
		{"all three", Filter{Sandbox: "a", Since: t0.Add(time.Second), Actions: []string{ActionExec, ActionRemove}}, []int{2, 6}},
		{"none", Filter{Sandbox: "zzz"}, nil},
	} {
		var want []Entry
		for _, i := range tc.want {
			want = append(want, all[i])
		}
		if got := readAll(t, l, tc.filter); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %d entries %v, want %v", tc.name, len(got), got, want)
		}
	}
}

func TestEmitErrorStopsRead(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	for i := range 5 {
		if err := l.Append(fixedEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	stop := errors.New("client went away")
	n := 0
	err := l.Read(Filter{}, func(Entry) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("Read = %v after %d entries, want the emit error after 2", err, n)
	}
}

func TestReadIsASnapshot(t *testing.T) {
	dir := t.TempDir()
	n := lineLen(t, fixedEntry(0))
	l := openLog(t, dir, Options{MaxBytes: int64(2 * n), MaxFiles: 2})
	for i := range 3 {
		if err := l.Append(fixedEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Appends (and so rotations, which rename and delete files) while
	// the read runs are not seen, and do not wait for it.
	var got []string
	next := 3
	err := l.Read(Filter{}, func(e Entry) error {
		got = append(got, e.Args["seq"].(string))
		for range 3 {
			if err := l.Append(fixedEntry(next)); err != nil {
				return err
			}
			next++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0000", "0001", "0002"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("snapshot read = %v, want %v", got, want)
	}
	if got, want := seqs(readAll(t, l, Filter{})), []string{"0006", "0007", "0008", "0009", "0010", "0011"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("later read = %v, want %v", got, want)
	}
}

func TestClosed(t *testing.T) {
	l, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(fixedEntry(0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v, want nil", err)
	}
	if err := l.Append(fixedEntry(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v, want ErrClosed", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close: %v, want ErrClosed", err)
	}
	if err := l.Read(Filter{}, func(Entry) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v, want ErrClosed", err)
	}
}

func TestDirAndFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "audit")
	openLog(t, dir, Options{})
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, FileName): 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Fatalf("%s mode %v, want %v", path, st.Mode().Perm(), want)
		}
	}
}

func TestReadDirMissing(t *testing.T) {
	err := ReadDir(filepath.Join(t.TempDir(), "nope"), Filter{}, func(Entry) error { return errors.New("called") }, nil)
	if err != nil {
		t.Fatalf("ReadDir of a missing dir: %v, want nil", err)
	}
}

func TestRotatedNamesIgnored(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{FileName + ".0", FileName + ".01", FileName + ".x", FileName + ".-1", "other.jsonl.1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("junk\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l := openLog(t, dir, Options{})
	if err := l.Append(fixedEntry(1)); err != nil {
		t.Fatal(err)
	}
	if got := seqs(readAll(t, l, Filter{})); !reflect.DeepEqual(got, []string{"0001"}) {
		t.Fatalf("got %v, want only the active file's entry", got)
	}
}
