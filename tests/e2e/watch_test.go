package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// cliWatch is a running `agentbox watch`: its stdout lines as they come.
type cliWatch struct {
	t     *testing.T
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	read  int // lines handed out by next
	more  chan struct{}
	ended chan struct{}
	// code and stderr (after the "watching" line) are set once ended
	// and stderrDone are closed.
	code       int
	stderr     testenv.SyncBuffer
	stderrDone chan struct{}
}

// startWatch runs `agentbox watch ARGS...` against d and returns once it
// printed "watching …" on stderr: the watch is in place.
func (d *daemon) startWatch(args ...string) *cliWatch {
	t := d.t
	t.Helper()
	cmd := exec.Command(agentboxBin, append([]string{"--socket", d.Socket, "watch"}, args...)...)
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=", "AGENTBOX_HOST=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &cliWatch{t: t, cmd: cmd, more: make(chan struct{}, 1), ended: make(chan struct{}), stderrDone: make(chan struct{})}
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-w.ended
	})
	go func() {
		defer close(w.ended)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.mu.Unlock()
			select {
			case w.more <- struct{}{}:
			default:
			}
		}
		<-w.stderrDone // Wait closes the pipe
		cmd.Wait()
		w.code = cmd.ProcessState.ExitCode()
	}()
	ready := make(chan string, 1)
	go func() {
		defer close(w.stderrDone)
		br := bufio.NewReader(stderr)
		first, _ := br.ReadString('\n')
		ready <- first
		io.Copy(&w.stderr, br)
	}()
	select {
	case first := <-ready:
		if !strings.HasPrefix(first, "watching ") {
			t.Fatalf("agentbox watch %v: stderr %q, want \"watching …\"", args, first)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("agentbox watch %v: not ready after 2 minutes", args)
	}
	return w
}

// wait waits for the command's end and returns its exit status and what
// it printed on stderr after the "watching" line.
func (w *cliWatch) wait(limit time.Duration) (int, string) {
	w.t.Helper()
	select {
	case <-w.ended:
		return w.code, w.stderr.String()
	case <-time.After(limit):
		w.t.Fatalf("agentbox watch did not end within %s", limit)
	}
	return 0, ""
}

// next returns the next line, failing the test after limit.
func (w *cliWatch) next(limit time.Duration) string {
	w.t.Helper()
	deadline := time.After(limit)
	for {
		w.mu.Lock()
		if w.read < len(w.lines) {
			l := w.lines[w.read]
			w.read++
			w.mu.Unlock()
			return l
		}
		w.mu.Unlock()
		select {
		case <-w.more:
		case <-w.ended:
			w.mu.Lock()
			n := len(w.lines)
			w.mu.Unlock()
			if w.read >= n {
				w.t.Fatal("agentbox watch ended")
			}
		case <-deadline:
			w.t.Fatalf("no watch line within %s", limit)
		}
	}
}

// expect reads len(want) lines and compares them.
func (w *cliWatch) expect(want ...string) []string {
	w.t.Helper()
	var got []string
	for range want {
		got = append(got, w.next(time.Minute))
	}
	if !slices.Equal(got, want) {
		w.t.Fatalf("watch lines:\n  got  %q\n  want %q", got, want)
	}
	return got
}

// wireWatchEvent is a line of `agentbox watch --json` (the API's event).
type wireWatchEvent struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	To   string `json:"to"`
	Info *struct {
		Type string `json:"type"`
		Size int64  `json:"size"`
		Mode string `json:"mode"`
	} `json:"info"`
	Time time.Time `json:"time"`
}

// TestWatch drives `agentbox watch` against a real guest: each change is
// one exec, and what the user sees for each is exactly the lines listed,
// in order. In JSON the entries carry their type, size and mode.
func TestWatch(t *testing.T) {
	d := startDaemon(t)
	img := testenv.Image(t)
	r := d.cli(nil, "create", "--image", img, "--name", "w1", "--accel", "tcg")
	if r.code != 0 {
		t.Fatalf("create: exit %d, stderr %q", r.code, r.stderr)
	}
	id := strings.TrimSpace(string(r.stdout))
	d.Track(id)
	expect(t, d.cli(nil, "exec", "w1", "--", "mkdir", "-p", "/work/w"), 0, "", "")

	// A missing path is a clear error before anything is printed.
	expect(t, d.cli(nil, "watch", "w1", "/work/nope"), 125, "",
		"agentbox: watch /work/nope: no such file or directory in sandbox "+id+": create it first, or watch its parent\n")

	lines := d.startWatch("--recursive", "w1", "/work/w")
	js := d.startWatch("--recursive", "--json", "w1", "/work/w")
	steps := []struct {
		cmd  []string
		want []string
	}{
		{[]string{"sh", "-c", ": > /work/w/a.txt"}, []string{"CREATE /work/w/a.txt"}},
		{[]string{"sh", "-c", "echo hello >> /work/w/a.txt"}, []string{"WRITE /work/w/a.txt"}},
		{[]string{"mv", "/work/w/a.txt", "/work/w/b.txt"}, []string{"RENAME /work/w/a.txt -> /work/w/b.txt"}},
		{[]string{"chmod", "600", "/work/w/b.txt"}, []string{"CHMOD /work/w/b.txt"}},
		{[]string{"rm", "/work/w/b.txt"}, []string{"REMOVE /work/w/b.txt"}},
		{[]string{"mkdir", "/work/w/sub"}, []string{"CREATE /work/w/sub"}},
		{[]string{"sh", "-c", "echo x > /work/w/sub/c.txt"}, []string{"CREATE /work/w/sub/c.txt", "WRITE /work/w/sub/c.txt"}},
		// Nothing else came in between: the next line is this one.
		{[]string{"sh", "-c", ": > /work/w/end"}, []string{"CREATE /work/w/end"}},
	}
	var jsonLines []string
	for _, s := range steps {
		expect(t, d.cli(nil, append([]string{"exec", "w1", "--"}, s.cmd...)...), 0, "", "")
		lines.expect(s.want...)
		for range s.want {
			jsonLines = append(jsonLines, js.next(time.Minute))
		}
	}
	var evs []wireWatchEvent
	for _, l := range jsonLines {
		var ev wireWatchEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("--json line %q: %v", l, err)
		}
		evs = append(evs, ev)
	}
	info := func(i int) string {
		ev := evs[i]
		if ev.Info == nil {
			return ev.Op + " no info"
		}
		if ev.Info.Type == "dir" {
			return fmt.Sprintf("%s dir %s", ev.Op, ev.Info.Mode) // a directory's size depends on the file system
		}
		return fmt.Sprintf("%s %s %s %d", ev.Op, ev.Info.Type, ev.Info.Mode, ev.Info.Size)
	}
	// An event's info is the path's stat when the agent reads the event:
	// `echo x > c.txt` creates and writes at once, so its CREATE may
	// already show the write (seen in CI: size 2); "|" separates those.
	wantInfo := []string{
		"CREATE file 0644 0", "WRITE file 0644 6", "RENAME file 0644 6", "CHMOD file 0600 6", "REMOVE no info",
		"CREATE dir 0755", "CREATE file 0644 0|CREATE file 0644 2", "WRITE file 0644 2", "CREATE file 0644 0",
	}
	for i := range evs {
		if !slices.Contains(strings.Split(wantInfo[i], "|"), info(i)) || evs[i].Time.IsZero() {
			t.Errorf("--json event %d %q: info %q, want %q", i, jsonLines[i], info(i), wantInfo[i])
		}
	}
	if evs[2].To != "/work/w/b.txt" {
		t.Errorf("RENAME to %q", evs[2].To)
	}

	// Stopping the sandbox ends the watch with an error; it is audited.
	expect(t, d.cli(nil, "stop", "w1"), 0, "w1\n", "")
	code, stderr := lines.wait(time.Minute)
	if code != 125 || !regexp.MustCompile(`^agentbox: sandbox `+id+` is (stopping|stopped): the watch of /work/w ended\n$`).MatchString(stderr) {
		t.Errorf("watch of a stopped sandbox: exit %d, stderr %q", code, stderr)
	}
	js.wait(time.Minute)
	var watches []wireAudit
	for _, e := range d.audit(id) {
		if e.Action == "file.watch" {
			watches = append(watches, e)
		}
	}
	if len(watches) != 3 { // the missing path, the two watchers
		t.Errorf("%d file.watch audit entries, want 3: %+v", len(watches), watches)
	}
}

// TestWatchManyFiles: 10 000 files created at once are reported, or the
// stream says events were lost (OVERFLOW); either way it goes on: the
// change made after them is seen.
func TestWatchManyFiles(t *testing.T) {
	d := startDaemon(t)
	img := testenv.Image(t)
	r := d.cli(nil, "create", "--image", img, "--name", "w1", "--accel", "tcg")
	if r.code != 0 {
		t.Fatalf("create: exit %d, stderr %q", r.code, r.stderr)
	}
	d.Track(strings.TrimSpace(string(r.stdout)))
	expect(t, d.cli(nil, "exec", "w1", "--", "mkdir", "-p", "/work/many"), 0, "", "")
	w := d.startWatch("--recursive", "w1", "/work/many")

	const n = 10000
	expect(t, d.cli(nil, "exec", "w1", "--", "python3", "-c",
		"for i in range(10000): open('/work/many/f%d' % i, 'w').close()"), 0, "", "")
	creates := map[string]bool{}
	overflow := false
	for len(creates) < n && !overflow {
		l := w.next(5 * time.Minute)
		switch {
		case l == "OVERFLOW /work/many":
			overflow = true
		case strings.HasPrefix(l, "CREATE /work/many/f"):
			creates[l] = true
		default:
			t.Fatalf("unexpected line %q", l)
		}
	}
	expect(t, d.cli(nil, "exec", "w1", "--", "touch", "/work/many/after"), 0, "", "")
	for {
		l := w.next(5 * time.Minute)
		if l == "CREATE /work/many/after" {
			break
		}
		if !strings.HasPrefix(l, "CREATE /work/many/f") && l != "OVERFLOW /work/many" && l != "CHMOD /work/many/after" {
			t.Fatalf("unexpected line %q", l)
		}
	}
	t.Logf("%d of %d creates, overflow: %v", len(creates), n, overflow)
}
