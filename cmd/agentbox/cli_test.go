package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
)

// testDaemon is a real apiserver.Server over a fake backend on a unix
// socket.
type testDaemon struct {
	sock    string
	backend *backendtest.Fake
	// mem is backend's in-memory service (startDaemon's; nil for
	// snapshotDaemon's).
	mem    *backendtest.Memory
	config string // an empty config file, so /etc/agentbox/config.toml is never read
}

// cliBackend returns the CLI tests' fake daemon: backendtest's in-memory
// service, with this package's cluster nodes (nodes_test.go), templates
// (templates_test.go) and watch (watch_test.go).
func cliBackend() *backendtest.Fake {
	b := backendtest.NewMemory()
	b.Nodes = backendtest.NodeFns{ListFn: listFakeNodes, DrainFn: drainFakeNode}
	b.Templates.ListFn = func(context.Context) ([]api.Template, error) { return fakeTemplates, nil }
	b.WatchFn = fakeWatch
	return b
}

// startDaemon serves a fresh cliBackend on a socket in a short temp dir
// (unix socket paths are limited to 108 bytes).
func startDaemon(t *testing.T) *testDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "abx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b := cliBackend()
	d := &testDaemon{sock: filepath.Join(dir, "s"), backend: b, mem: b.Memory, config: filepath.Join(dir, "config.toml")}
	if err := os.WriteFile(d.config, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.NewServer(apiserver.Config{Backend: d.backend})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Shutdown(t.Context())
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return d
}

// result is what one CLI invocation printed and its exit status.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs `agentbox --socket SOCK ARGS...` in-process with stdin (nil:
// /dev/null) and returns what it printed and its exit status, as main
// would exit.
func (d *testDaemon) cli(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	if stdin == nil {
		null, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer null.Close()
		stdin = null
	}
	var stdout, stderr bytes.Buffer
	app := newApp()
	app.Reader, app.Writer, app.ErrWriter = stdin, &stdout, &stderr
	err := app.Run(append([]string{"agentbox", "--config", d.config, "--socket", d.sock}, args...))
	code := exitCode(err, &stderr)
	return result{stdout.String(), stderr.String(), code}
}

func (r result) check(t *testing.T, code int, stdout, stderr string) {
	t.Helper()
	if r.code != code || r.stdout != stdout || r.stderr != stderr {
		t.Errorf("got exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr, code, stdout, stderr)
	}
}

func TestCLICreateExec(t *testing.T) {
	d := startDaemon(t)
	img := t.TempDir()
	d.cli(t, nil, "create", "--image", img, "--name", "w1", "--cpus", "2", "--memory", "512", "--label", "team=a", "--label", "x=y",
		"--ttl", "2h", "--idle-timeout", "10m", "--exec-timeout", "30s", "--max-execs", "7", "--accel", "tcg", "--boot-timeout", "1m").
		check(t, 0, "000000abc001\n", "")
	want := api.CreateSandboxRequest{Image: img, Name: "w1", VCPUs: 2, MemoryMiB: 512, Accel: "tcg", BootTimeoutMs: 60000,
		Labels: map[string]string{"team": "a", "x": "y"},
		Limits: api.Limits{TTLSeconds: 7200, IdleTimeoutSeconds: 600, ExecTimeoutMs: 30000, MaxExecs: 7}}
	if got := d.mem.Creates(); len(got) != 1 || !equalJSON(got[0], want) {
		t.Fatalf("create requests %+v, want %+v", got, want)
	}

	// A relative image dir is sent absolute.
	wd, _ := os.Getwd()
	d.cli(t, nil, "create", "--image", "some/img").check(t, 0, "000000abc002\n", "")
	if got := d.mem.Creates()[1].Image; got != filepath.Join(wd, "some/img") {
		t.Errorf("image %q, want %q", got, filepath.Join(wd, "some/img"))
	}
	d.cli(t, nil, "create", "--image", img, "--name", "w1").check(t, 125, "", "agentbox: the name \"w1\" is taken: choose another\n")
	d.cli(t, nil, "create", "--image", img, "--ttl", "1500ms").check(t, 125, "", "agentbox: --ttl 1.5s: must be whole seconds (e.g. 90s, 30m, 2h)\n")

	// Attached exec (stdin /dev/null): exact bytes and the command's code.
	var all, rev [256]byte
	for i := range all {
		all[i], rev[255-i] = byte(i), byte(i)
	}
	d.cli(t, nil, "exec", "-e", "K=V", "-w", "/tmp", "--timeout", "5s", "w1", "--", "allbytes", "3").check(t, 3, string(all[:]), string(rev[:]))
	last := d.mem.Execs()[len(d.mem.Execs())-1]
	if !equalJSON(last, api.ExecRequest{Cmd: []string{"allbytes", "3"}, Env: []string{"K=V"}, Cwd: "/tmp", TimeoutMs: 5000}) {
		t.Errorf("exec request %+v", last)
	}
	d.cli(t, nil, "exec", "w1", "--", "out", "to stdout\n", "to stderr\n", "0").check(t, 0, "to stdout\n", "to stderr\n")
	d.cli(t, nil, "exec", "w1", "out", "", "", "0").check(t, 0, "", "")
	d.cli(t, nil, "exec", "w1", "--", "missing").check(t, 127, "", "agentbox: missing: command not found\n")
	d.cli(t, nil, "exec", "w1", "--", "timeout").check(t, 124, "", "agentbox: command timed out after the sandbox's command timeout and was killed\n")
	d.cli(t, nil, "exec", "--timeout", "2s", "w1", "--", "timeout").check(t, 124, "", "agentbox: command timed out after 2s and was killed\n")
	d.cli(t, nil, "exec", "--shell", "w1", "--", "out", "x", "y", "0").check(t, 127, "", "agentbox: /bin/sh: command not found\n")
	d.cli(t, nil, "exec", "w1", "--timeout", "5s", "--", "ls").check(t, 125, "", "agentbox: \"--timeout\" after SANDBOX: flags go before it: `agentbox exec [FLAGS] SANDBOX -- COMMAND [ARG...]`\n")
	d.cli(t, nil, "exec", "nope", "--", "ls").check(t, 125, "", "agentbox: no sandbox \"nope\": see `agentbox ls`\n")

	// Stdin streamed over the interactive exec (no detached process).
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	nproc := d.mem.Processes()
	d.cli(t, bytes.NewReader(big), "exec", "w1", "--", "cat").check(t, 0, string(big), "")
	if last := d.mem.Execs()[len(d.mem.Execs())-1]; last.StdinOpen || len(d.mem.Interactive()) != 1 || d.mem.Processes() != nproc {
		t.Errorf("exec with stdin: request %+v, %d interactive execs, %d processes (want no stdin_open, 1, %d)", last, len(d.mem.Interactive()), d.mem.Processes(), nproc)
	}
	// -t needs a terminal on stdin.
	d.cli(t, strings.NewReader("x"), "exec", "-it", "w1", "--", "cat").check(t, 125, "", "agentbox: -t needs a terminal on stdin: run it from one, or drop -t to pipe stdin (-i)\n")

	// History: the newest two of the execs above, as a table.
	n := len(d.mem.Execs())
	d.cli(t, nil, "history", "-n", "2", "w1").check(t, 0, fmt.Sprintf(
		"ID       STARTED              DURATION  EXIT  CALLER  CMD\n"+
			"e%06d  2026-11-29 12:00:%02d  250ms     0     uid:0   ls\n"+
			"e%06d  2026-11-29 12:00:%02d  250ms     0     uid:0   cat\n", n-1, n-1, n, n), "")
	d.cli(t, nil, "history", "nope").check(t, 125, "", "agentbox: no sandbox \"nope\": see `agentbox ls`\n")
}

func TestCLIDetached(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "create", "--image", "/img", "--name", "w1").check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "exec", "-d", "w1", "--", "out", "hello\n", "oops\n", "4").check(t, 0, "p1\n", "")
	d.cli(t, nil, "output", "-f", "w1", "p1").check(t, 4, "hello\n", "oops\n")
	d.cli(t, nil, "output", "--offset", "2", "w1", "p1").check(t, 0, "llo\n", "oops\n")
	d.cli(t, nil, "output", "w1", "p1", "-f").check(t, 125, "", "agentbox: \"-f\" after the arguments: flags go before them: usage: agentbox output [-f] [--offset N] SANDBOX PROCESS\n")

	d.cli(t, nil, "exec", "-d", "-i", "w1", "--", "cat").check(t, 0, "p2\n", "")
	d.cli(t, strings.NewReader("one "), "stdin", "w1", "p2").check(t, 0, "", "")
	d.cli(t, strings.NewReader("two"), "stdin", "--close", "w1", "p2").check(t, 0, "", "")
	d.cli(t, nil, "output", "-f", "w1", "p2").check(t, 0, "one two", "")
	d.cli(t, strings.NewReader("x"), "stdin", "w1", "p2").check(t, 125, "", "agentbox: the stdin of process p2 is closed\n")

	d.cli(t, nil, "exec", "-d", "w1", "--", "sleep").check(t, 0, "p3\n", "")
	d.cli(t, nil, "kill", "-s", "TERM", "w1", "p3").check(t, 0, "", "")
	d.cli(t, nil, "output", "-f", "w1", "p3").check(t, 137, "", "")
	d.cli(t, nil, "kill", "w1", "p3").check(t, 125, "", "agentbox: process p3 has exited\n")

	r := d.cli(t, nil, "ps", "w1")
	want := "ID  PID  STATE   EXIT  TTY  CMD\n" +
		"p1  200  exited  4     -    out $'hello\\n' $'oops\\n' 4\n" +
		"p2  201  exited  0     -    cat\n" +
		"p3  202  exited  137   -    sleep\n"
	r.check(t, 0, want, "")
}

func TestCLICopy(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "create", "--image", "/img", "--name", "w1").check(t, 0, "000000abc001\n", "")
	dir := t.TempDir()
	data := make([]byte, 5<<20+123)
	rand.Read(data)
	src := filepath.Join(dir, "data.bin")
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	// Into a guest directory: the base name is kept, so is the mode.
	d.cli(t, nil, "cp", src, "w1:/work").check(t, 0, "", "")
	if got, mode, ok := d.mem.File("000000abc001", "/work/data.bin"); !ok || !bytes.Equal(got, data) || mode != 0o640 {
		t.Fatalf("guest /work/data.bin = %v", ok)
	}
	d.cli(t, nil, "cp", "--mode", "0755", "-p", src, "w1:/a/b/").check(t, 0, "", "")
	if _, mode, ok := d.mem.File("000000abc001", "/a/b/data.bin"); !ok || mode != 0o755 {
		t.Errorf("guest /a/b/data.bin: %v, mode %v", ok, mode)
	}
	d.cli(t, nil, "cp", src, "w1:/nodir/x").check(t, 125, "", "agentbox: /nodir: no such directory: create it or pass parents (create /nodir first, or pass --parents)\n")
	// A missing sandbox is not_found too, but wants no --parents hint.
	d.cli(t, nil, "cp", src, "nosuchbox:/tmp/x").check(t, 125, "", "agentbox: no sandbox \"nosuchbox\": see `agentbox ls`\n")

	// Back into a local directory and to a named file: byte-exact, mode kept.
	out := t.TempDir()
	d.cli(t, nil, "cp", "w1:/work/data.bin", out).check(t, 0, "", "")
	got, err := os.ReadFile(filepath.Join(out, "data.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("downloaded %d bytes (%v), want %d equal bytes", len(got), err, len(data))
	}
	if fi, _ := os.Stat(filepath.Join(out, "data.bin")); fi.Mode().Perm() != 0o640 {
		t.Errorf("downloaded mode %v, want 0640", fi.Mode().Perm())
	}
	d.cli(t, nil, "cp", "w1:/work/data.bin", filepath.Join(out, "copy")).check(t, 0, "", "")
	if got, _ := os.ReadFile(filepath.Join(out, "copy")); !bytes.Equal(got, data) {
		t.Errorf("downloaded copy differs")
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 2 {
		t.Errorf("local dir holds %d entries, want 2 (no temporary files left)", len(entries))
	}

	// Stdin and stdout.
	d.cli(t, strings.NewReader("from stdin"), "cp", "-", "w1:/work/s.txt").check(t, 0, "", "")
	d.cli(t, nil, "cp", "w1:/work/s.txt", "-").check(t, 0, "from stdin", "")
	if _, mode, _ := d.mem.File("000000abc001", "/work/s.txt"); mode != 0o644 {
		t.Errorf("mode from stdin %v, want 0644", mode)
	}

	// Errors.
	d.cli(t, nil, "cp", dir, "w1:/work").check(t, 125, "", "agentbox: "+dir+" is a directory: cp copies single files; use tar: agentbox exec ... tar (see `agentbox cp --help`)\n")
	d.cli(t, nil, "cp", "w1:/work", out).check(t, 125, "", "agentbox: w1:/work is a directory: cp copies single files; use tar: agentbox exec ... tar (see `agentbox cp --help`)\n")
	d.cli(t, nil, "cp", "w1:/missing", out).check(t, 125, "", "agentbox: /missing: no such file\n")
	d.cli(t, nil, "cp", "-", "w1:/work/").check(t, 125, "", "agentbox: w1:/work/ is a directory: with - as SRC, DST must name the file\n")
	if entries, _ := os.ReadDir(out); len(entries) != 2 {
		t.Errorf("a failed download left %d entries, want 2", len(entries))
	}
}

func TestCLIListInspectRemove(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "ls").check(t, 0, "ID  NAME  STATE  IMAGE  TEMPLATE  CPUS  MEMORY  AGE\n", "")
	d.cli(t, nil, "create", "--image", "/img", "--name", "w1", "--label", "team=a").check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "create", "--image", "/img", "--cpus", "4", "--memory", "2048").check(t, 0, "000000abc002\n", "")

	d.cli(t, nil, "ls").check(t, 0, ""+
		"ID            NAME  STATE    IMAGE       TEMPLATE  CPUS  MEMORY   AGE\n"+
		"000000abc001  w1    running  test-image  -         1     256MiB   1m\n"+
		"000000abc002  -     running  test-image  -         4     2048MiB  1m\n", "")
	d.cli(t, nil, "ls", "-q", "--label", "team=a").check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "ls", "-q", "--state", "stopped").check(t, 0, "", "")
	d.cli(t, nil, "ls", "--json", "--state", "stopped").check(t, 0, "[]\n", "")
	d.cli(t, nil, "ls", "--label", "team").check(t, 125, "", "agentbox: --label \"team\": want KEY=VALUE\n")

	r := d.cli(t, nil, "inspect", "w1", "nope", "000000abc002")
	var sbs []api.Sandbox
	if err := json.Unmarshal([]byte(r.stdout), &sbs); err != nil || len(sbs) != 2 || sbs[0].Name != "w1" || sbs[1].ID != "000000abc002" || sbs[1].VCPUs != 4 {
		t.Errorf("inspect printed %q (%v)", r.stdout, err)
	}
	if r.code != 125 || r.stderr != "agentbox: no sandbox \"nope\": see `agentbox ls`\n" {
		t.Errorf("inspect: exit %d, stderr %q", r.code, r.stderr)
	}

	d.cli(t, nil, "logs", "--tail", "24", "w1").check(t, 0, "agentbox-init: agent up\n", "")

	// rm without -f refuses a running sandbox with the server's message.
	d.cli(t, nil, "rm", "w1").check(t, 125, "", "agentbox: sandbox 000000abc001 is running: stop it first or remove it with force (agentbox rm -f)\n")
	d.cli(t, nil, "rm", "w1", "-f").check(t, 125, "", "agentbox: \"-f\" after the arguments: flags go before them: usage: agentbox rm [-f] SANDBOX...\n")
	d.cli(t, nil, "stop", "w1").check(t, 0, "w1\n", "")
	d.cli(t, nil, "ls", "-q", "--state", "stopped").check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "rm", "w1").check(t, 0, "w1\n", "")
	d.cli(t, nil, "rm", "-f", "000000abc002", "w1").check(t, 125, "000000abc002\n", "agentbox: no sandbox \"w1\": see `agentbox ls`\n")
	d.cli(t, nil, "ls", "-q").check(t, 0, "", "")
}

func TestCLIAudit(t *testing.T) {
	d := startDaemon(t)
	r := d.cli(t, nil, "audit", "000000abc001")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 2 || !strings.HasSuffix(lines[1], " 000000abc001 uid:0 exec `sh -c 'echo hi'` exit=3 20ms out=3B") ||
		!strings.HasSuffix(lines[0], " 000000abc001 uid:0 create image=\"/img\" 1.5s") {
		t.Errorf("audit: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = d.cli(t, nil, "audit", "--json")
	var want bytes.Buffer
	for _, e := range backendtest.MemoryAudit() {
		json.NewEncoder(&want).Encode(e)
	}
	r.check(t, 0, want.String(), "")
	r = d.cli(t, nil, "audit", "--replay", "000000abc001")
	if r.code != 0 || !strings.Contains(r.stdout, "echo hi") || r.stderr != "" {
		t.Errorf("audit --replay: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestCLIRunThroughDaemon(t *testing.T) {
	d := startDaemon(t)
	img := t.TempDir()
	d.cli(t, strings.NewReader("piped"), "run", "--image", img, "--timeout", "2h", "--", "cat").check(t, 0, "piped", "")
	d.cli(t, nil, "run", "--image", img, "--cpus", "2", "--", "out", "o", "e", "9").check(t, 9, "o", "e")
	if len(d.mem.Creates()) != 2 {
		t.Fatalf("%d creates, want 2", len(d.mem.Creates()))
	}
	c := d.mem.Creates()[0]
	if c.Image != img || c.Labels[runLabel] != "1" || len(c.Labels[runIDLabel]) != 16 || c.Limits.TTLSeconds != 2*3600+120 || c.BootTimeoutMs != 120000 {
		t.Errorf("run's create request %+v", c)
	}
	if c := d.mem.Creates()[1]; c.VCPUs != 2 || c.Limits.TTLSeconds != 3600+120 {
		t.Errorf("run's second create request %+v", c)
	}
	// -t without a terminal is refused before anything is created.
	d.cli(t, strings.NewReader("x"), "run", "-it", "--image", img, "--", "cat").check(t, 125, "", "agentbox: -t needs a terminal on stdin: run it from one, or drop -t to pipe stdin (-i)\n")
	if len(d.mem.Creates()) != 2 {
		t.Errorf("run -t without a terminal created a sandbox: %d creates", len(d.mem.Creates()))
	}
	if got := strings.Join(d.mem.Deletes(), ","); got != "000000abc001 force=true,000000abc002 force=true" {
		t.Errorf("deletes %s", got)
	}
	d.cli(t, nil, "ls", "-q").check(t, 0, "", "")

	// --keep leaves it and says how to reach it.
	d.cli(t, nil, "run", "--keep", "--image", img, "--", "out", "", "", "0").check(t, 0, "",
		"agentbox: sandbox 000000abc003 kept running\n  exec:   agentbox exec 000000abc003 -- COMMAND [ARG...]\n  remove: agentbox rm -f 000000abc003\n")
	if c := d.mem.Creates()[2]; c.Limits.TTLSeconds != 0 {
		t.Errorf("--keep: TTL %d, want none", c.Limits.TTLSeconds)
	}

	// A daemon that answers with an error is reported, not bypassed.
	d.mem.SetInfoError(api.Errorf(503, api.CodeUnavailable, "libvirt is unreachable: start libvirtd"))
	d.cli(t, nil, "run", "--image", img, "--", "cat").check(t, 125, "", "agentbox: the agentbox daemon at "+d.sock+": libvirt is unreachable: start libvirtd (pass --local to run in-process without it)\n")
}

func TestCLIUnreachable(t *testing.T) {
	d := startDaemon(t)
	d.sock = filepath.Join(filepath.Dir(d.sock), "none.sock")
	want := "agentbox: cannot reach the agentbox daemon at " + d.sock + ": start it with `agentbox serve --socket " + d.sock + "` (or pass --socket / set AGENTBOX_SOCKET)\n"
	for _, args := range [][]string{{"ls"}, {"create", "--image", "/img"}, {"exec", "w1", "--", "ls"}, {"rm", "-f", "a", "b"}, {"cp", "w1:/x", "-"}} {
		d.cli(t, nil, args...).check(t, 125, "", want)
	}
}

// TestNoDaemon: `run` falls back in-process only when no daemon is there:
// no socket file, or a stale one nobody accepts on. A daemon that answers
// (even with an error) or a --host is never bypassed.
func TestNoDaemon(t *testing.T) {
	d := startDaemon(t)
	dir := filepath.Dir(d.sock)
	stale := filepath.Join(dir, "stale")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	d.mem.SetInfoError(api.Errorf(503, api.CodeUnavailable, "shutting down"))
	for _, tc := range []struct {
		host, sock string
		want       bool
	}{
		{"", filepath.Join(dir, "missing"), true},
		{"", stale, true},
		{"", d.sock, false},
		{"http://127.0.0.1:1", filepath.Join(dir, "missing"), false},
	} {
		_, err := client.New(tc.sock).Info(t.Context())
		if err == nil {
			t.Fatalf("Info on %s: no error", tc.sock)
		}
		if got := noDaemon(tc.host, err); got != tc.want {
			t.Errorf("noDaemon(%q, %s, %v) = %v, want %v", tc.host, tc.sock, err, got, tc.want)
		}
	}
}

// equalJSON reports whether a and b encode to the same JSON.
func equalJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// interruptWhenSleeping sends this process SIGINT once the fake runs a
// "sleep" command: the CLI's handler (registered before its request went
// out) catches it.
func interruptWhenSleeping(t *testing.T, d *testDaemon) {
	go func() {
		<-d.mem.Sleeping()
		syscall.Kill(syscall.Getpid(), syscall.SIGINT)
	}()
}

func TestCLIInterrupt(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "create", "--image", "/img", "--name", "w1").check(t, 0, "000000abc001\n", "")

	// Attached: the request is cancelled, the server kills the command.
	interruptWhenSleeping(t, d)
	d.cli(t, nil, "exec", "w1", "--", "sleep").check(t, 130, "", "agentbox: interrupt: guest command killed\n")

	// With stdin: the interactive exec's connection closes, the server
	// kills the command; no detached process is involved.
	interruptWhenSleeping(t, d)
	d.cli(t, strings.NewReader("in"), "exec", "w1", "--", "sleep").check(t, 130, "", "agentbox: interrupt: guest command killed\n")
	kills, procs, interactive := strings.Join(d.mem.Kills(), ","), d.mem.Processes(), len(d.mem.Interactive())
	if kills != "" || procs != 0 || interactive != 1 {
		t.Errorf("kills %q, %d processes, %d interactive execs; want none, 0, 1", kills, procs, interactive)
	}

	// run: the sandbox is removed after the interrupt.
	interruptWhenSleeping(t, d)
	d.cli(t, nil, "run", "--image", "/img", "--", "sleep").check(t, 130, "", "agentbox: interrupt: guest command killed\n")
	if got := strings.Join(d.mem.Deletes(), ","); got != "000000abc002 force=true" {
		t.Errorf("deletes %q", got)
	}
	d.cli(t, nil, "ls", "-q").check(t, 0, "000000abc001\n", "")
}

func TestCLIEvents(t *testing.T) {
	d := startDaemon(t)
	line := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).Local().Format(time.RFC3339) + " sandbox.state 000000abc001 w1 failed (guest died)\n"
	d.cli(t, nil, "events").check(t, 125, line, "agentbox: the daemon ended the event stream (is it shutting down?)\n")
	d.cli(t, nil, "events", "--json").check(t, 125, `{"time":"2025-01-02T03:04:05Z","type":"sandbox.state","sandbox":"000000abc001","name":"w1","state":"failed","reason":"guest died"}`+"\n",
		"agentbox: the daemon ended the event stream (is it shutting down?)\n")
}

// TestCLIConfig: one config file serves every command; keys of other
// commands are skipped, unknown keys are errors.
func TestCLIConfig(t *testing.T) {
	d := startDaemon(t)
	cfg := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(cfg, []byte("socket = \""+d.sock+"\"\nimage = \"/img\"\nmemory = 300\naccel = \"tcg\"\ntimeout = \"5s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.config = cfg
	run := func(args ...string) result {
		var stdout, stderr bytes.Buffer
		app := newApp()
		app.Writer, app.ErrWriter = &stdout, &stderr
		err := app.Run(append([]string{"agentbox", "--config", cfg}, args...))
		code := exitCode(err, &stderr)
		return result{stdout.String(), stderr.String(), code}
	}
	run("create").check(t, 0, "000000abc001\n", "")
	if c := d.mem.Creates()[0]; c.Image != "/img" || c.MemoryMiB != 300 || c.Accel != "tcg" {
		t.Errorf("create from config: %+v", c)
	}
	run("ls", "-q").check(t, 0, "000000abc001\n", "")
	if err := os.WriteFile(cfg, []byte("socket = \""+d.sock+"\"\nimage_dir = \"/img\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("ls", "-q").check(t, 125, "", "agentbox: config "+cfg+": unknown key \"image_dir\": keys are long flag names of `agentbox --help` and `agentbox COMMAND --help`\n")
}
