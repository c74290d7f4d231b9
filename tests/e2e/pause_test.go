package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// wirePaused is what the lifecycle tests read of a sandbox.
type wirePaused struct {
	State  string `json:"state"`
	Reason string `json:"reason"`
	Paused *struct {
		ToDisk       bool   `json:"to_disk"`
		File         string `json:"file"`
		Tag          string `json:"tag"`
		VMStateBytes int64  `json:"vmstate_bytes"`
		DiskBytes    int64  `json:"disk_bytes"`
	} `json:"paused"`
	Limits struct {
		IdleAction       string `json:"idle_action"`
		PausedTTLSeconds int64  `json:"paused_ttl_seconds"`
	} `json:"limits"`
}

func (d *daemon) paused(ref string) wirePaused {
	d.t.Helper()
	var p wirePaused
	d.callJSON("GET", "/v1/sandboxes/"+ref, nil, http.StatusOK, &p)
	return p
}

// pauseCounter is a python3 process counting in memory, one line every
// 0.1 s: started with `exec -d`, so the guest agent keeps it and its
// output.
const pauseCounter = `import time
n = 0
while True:
    n += 1
    print(n, flush=True)
    time.sleep(0.1)
`

// served GETs http://addr/hello through a port forward and checks the
// guest's answer.
func served(t *testing.T, addr, when string) {
	t.Helper()
	var body string
	testenv.WaitFor(t, 2*time.Minute, "the guest's HTTP server through "+addr+" "+when, func() bool {
		resp, err := http.Get("http://" + addr + "/hello")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if body != "hello from the guest\n" {
		t.Fatalf("%s: GET /hello through %s gave %q", when, addr, body)
	}
}

// TestDaemonPauseToDisk: through the CLI and the API, a sandbox with a
// network paused in memory and to disk, once across a kill -9 of the
// daemon, resumes in place (same ID, name, tap, address, MAC) with a
// python3 process started with `exec -d` counting on: one `output -f`
// rides across the pauses, and with the one after the daemon's restart
// (from the offset the cut one printed) it shows every number exactly
// once, in order; `ps` and `kill` work after it, its end is recorded
// once. A port forward to a python3 -m http.server in the guest keeps its
// address, resets connections while the sandbox is paused and serves
// again after each resume; a stop lists it closed and a start opens it
// again. While it is paused (in memory, to disk, and to disk across the
// daemon's restart) every call on the counter gets 409 with the resume
// hint, and the restarted daemon lists it (as of the pause); a follow cut
// by the stop says its process was lost with it. `exec --resume` resumes
// a sandbox paused to disk. The wrong-state errors say what to do; a stop
// and start keep a file. The daemon logs no cgroup it could not remove
// and no internal error.
func TestDaemonPauseToDisk(t *testing.T) {
	port, fetch := helloServer(t)
	d := newDaemon(t, netFlags(t, 215, "abxpause")...)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	sb := d.create(createBody(t, fmt.Sprintf(`"name":"hib","memory_mib":256,"boot_timeout_ms":180000,"network":{"mode":"allowlist","allow":["host:%d"]}`, port)))
	if got := strings.TrimSpace(d.out(sb.ID, fetch...)); got != hostHello {
		t.Fatalf("fetch from the host gave %q", got)
	}
	r := d.cli(nil, "exec", "-d", "hib", "--", "python3", "-c", pauseCounter)
	if r.code != 0 {
		t.Fatalf("exec -d: exit %d, %s", r.code, r.stderr)
	}
	proc := strings.TrimSpace(string(r.stdout))
	d.upload(sb.ID, "/srv/hello", []byte("hello from the guest\n"))
	d.httpServer(sb.ID, 8000, "127.0.0.1")
	r = d.cli(nil, "port", "hib", "8000")
	m := portLine.FindStringSubmatch(string(r.stdout))
	if r.code != 0 || m == nil {
		t.Fatalf("agentbox port: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	addr := m[1]
	served(t, addr, "before any pause")
	net0 := d.network(sb.ID)
	f1 := d.follow(sb.ID, proc, 0)
	lines := 5
	f1.untilLines(t, lines)

	// In memory, through the CLI.
	if r := d.cli(nil, "pause", "hib"); r.code != 0 || string(r.stdout) != "hib\n" {
		t.Fatalf("agentbox pause: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if p := d.paused("hib"); p.State != "paused" || p.Paused == nil || p.Paused.ToDisk {
		t.Fatalf("after pause: %+v", p)
	}
	e := d.apiError("POST", "/v1/sandboxes/hib/exec", "application/json", []byte(`{"cmd":["true"]}`), http.StatusConflict, "sandbox_not_running")
	if !strings.Contains(e.Message, "resume it first: agentbox resume hib") || !strings.Contains(e.Message, "?resume=true") {
		t.Errorf("exec on a paused sandbox: %q; want the hint", e.Message)
	}
	d.apiError("GET", "/v1/sandboxes/hib/files/stat?path=/etc", "", nil, http.StatusConflict, "sandbox_not_running")
	d.apiError("POST", "/v1/sandboxes/hib/ports", "application/json", []byte(`{"guest_port":9000}`), http.StatusConflict, "sandbox_not_running")
	pausedCalls(t, d, "hib", proc, "paused in memory")
	expectReset(t, addr)
	if r := d.cli(nil, "resume", "hib"); r.code != 0 {
		t.Fatalf("agentbox resume: exit %d, %s", r.code, r.stderr)
	}
	if r := d.cli(nil, "resume", "hib"); r.code != 125 || !strings.Contains(string(r.stderr), "not paused") {
		t.Errorf("resume of a running sandbox: exit %d, %s; want 125 saying it is not paused", r.code, r.stderr)
	}
	if r := d.cli(nil, "start", "hib"); r.code != 125 || !strings.Contains(string(r.stderr), "running already") {
		t.Errorf("start of a running sandbox: exit %d, %s; want 125 saying it runs", r.code, r.stderr)
	}
	lines += 10
	f1.untilLines(t, lines)
	served(t, addr, "after the resume in memory")

	// To disk, resumed by `exec --resume`; the same output -f goes on.
	if r := d.cli(nil, "pause", "--to-disk", "hib"); r.code != 0 {
		t.Fatalf("agentbox pause --to-disk: exit %d, %s", r.code, r.stderr)
	}
	p := d.paused("hib")
	if p.State != "paused" || p.Paused == nil || !p.Paused.ToDisk || p.Paused.VMStateBytes <= 0 || p.Paused.DiskBytes <= 0 || !strings.HasSuffix(p.Paused.File, "/overlay.qcow2") {
		t.Fatalf("after pause --to-disk: %+v", p)
	}
	if slices.Contains(testenv.Domains(t), sb.Domain) {
		t.Fatalf("domain %s still exists while paused to disk", sb.Domain)
	}
	if ps := d.ports("hib"); len(ps) != 1 || !ps[0].Open || ps[0].HostAddr != addr {
		t.Errorf("forwards while paused to disk: %+v; want the one at %s, open", ps, addr)
	}
	expectReset(t, addr)
	pausedCalls(t, d, "hib", proc, "paused to disk")
	expect(t, d.cli(nil, "exec", "--resume", "hib", "--", "echo", "awake"), 0, "awake\n", "")
	lines += 10
	f1.untilLines(t, lines)
	served(t, addr, "after the resume from disk")

	// To disk again, then the daemon killed and started again.
	if r := d.cli(nil, "pause", "--to-disk", "hib"); r.code != 0 {
		t.Fatalf("agentbox pause --to-disk: exit %d, %s", r.code, r.stderr)
	}
	d.Kill9()
	if code := f1.end(t); code != 125 {
		t.Fatalf("output -f cut by the daemon's death: exit %d, want 125 (stderr %q)", code, f1.stderr.String())
	}
	mo := regexp.MustCompile(`resume from offset (\d+)`).FindStringSubmatch(f1.stderr.String())
	if mo == nil {
		t.Fatalf("the cut output -f did not say where to resume: %q", f1.stderr.String())
	}
	offset, _ := strconv.ParseInt(mo[1], 10, 64)
	if offset != int64(len(f1.got)) {
		t.Fatalf("resume offset %d, but %d bytes were printed", offset, len(f1.got))
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if p := d.paused("hib"); p.State != "paused" || p.Paused == nil || !p.Paused.ToDisk {
		t.Fatalf("after the daemon's restart: %+v, want paused to disk", p)
	}
	if ps := d.ports("hib"); len(ps) != 1 || !ps[0].Open || ps[0].HostAddr != addr {
		t.Errorf("forwards after the restart, paused: %+v; want the one at %s, open", ps, addr)
	}
	expectReset(t, addr)
	// The restarted daemon cannot ask the guest: it lists the counter
	// as it was at the pause, and calls on it get the resume hint, not
	// "not found".
	r = d.cli(nil, "ps", "hib")
	if r.code != 0 || !regexp.MustCompile(`(?m)^`+proc+`\s+\d+\s+running\s`).Match(r.stdout) || !strings.Contains(string(r.stderr), "sandbox hib is paused") {
		t.Errorf("ps after the restart, paused to disk (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
	}
	pausedCalls(t, d, "hib", proc, "paused to disk, after the daemon's restart")
	f2 := d.follow(sb.ID, proc, offset) // waits for the resume
	var after wireSandbox
	d.callJSON("POST", "/v1/sandboxes/hib/resume", nil, http.StatusOK, &after)
	if after.ID != sb.ID || after.Name != "hib" || after.State != "running" {
		t.Fatalf("resumed: %+v", after)
	}
	if net1 := d.network(sb.ID); net1.Tap != net0.Tap || net1.Address != net0.Address || net1.MAC != net0.MAC {
		t.Errorf("network after resume %+v, before %+v: want the same tap, address, MAC", net1, net0)
	}
	f2.untilLines(t, 10)
	served(t, addr, "after the restart and resume")
	if got := strings.TrimSpace(d.out(sb.ID, fetch...)); got != hostHello {
		t.Fatalf("after resume from disk: fetch from the host gave %q", got)
	}
	r = d.cli(nil, "ps", "hib")
	if r.code != 0 || !regexp.MustCompile(`(?m)^`+proc+`\s+\d+\s+running\s`).Match(r.stdout) {
		t.Fatalf("ps after the restart and resume (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
	}
	d.killCounter(t, "hib", proc, f1, f2, offset)
	var exits []string
	for _, e := range d.audit(sb.ID) {
		if e.Action == "process.exit" && e.ExecID == proc {
			s := e.Error
			if e.ExitCode != nil {
				s = strconv.Itoa(*e.ExitCode)
			}
			exits = append(exits, s)
		}
	}
	if !slices.Equal(exits, []string{"137"}) {
		t.Errorf("process.exit audit entries of the counter: %q, want one 137", exits)
	}
	var hist struct {
		Execs []struct {
			ID       string `json:"id"`
			ExitCode *int   `json:"exit_code"`
			Error    string `json:"error"`
		} `json:"execs"`
	}
	d.callJSON("GET", "/v1/sandboxes/hib/execs", nil, http.StatusOK, &hist)
	found := 0
	for _, h := range hist.Execs {
		if h.ID != proc {
			continue
		}
		found++
		if h.ExitCode == nil || *h.ExitCode != 137 || h.Error != "" {
			t.Errorf("exec history of the counter: exit %v, error %q; want 137 (never lost)", h.ExitCode, h.Error)
		}
	}
	if found != 1 {
		t.Errorf("exec history has %d entries of the counter, want 1", found)
	}

	// Stop, then start: the file stays, the processes do not; the port
	// forward is listed closed meanwhile and opens again at its address.
	d.out(sb.ID, "sh", "-c", "echo kept > /root/kept && sync")
	r = d.cli(nil, "exec", "-d", "hib", "--", "sh", "-c", "echo up; exec sleep 1000")
	if r.code != 0 {
		t.Fatalf("exec -d: exit %d, %s", r.code, r.stderr)
	}
	sleeper := strings.TrimSpace(string(r.stdout))
	f3 := d.follow(sb.ID, sleeper, 0)
	f3.untilLines(t, 1)
	d.call("POST", "/v1/sandboxes/hib/stop", nil, http.StatusOK)
	// The follow ends saying the process went with the stop, with no
	// offset to resume from (nothing is left), and no 500.
	if code := f3.end(t); code != 125 || !strings.Contains(f3.stderr.String(), "was lost with the sandbox's stop") || strings.Contains(f3.stderr.String(), "resume from offset") {
		t.Errorf("output -f cut by a stop: exit %d, %q; want 125 saying the process was lost with the stop", code, f3.stderr.String())
	}
	if strings.Contains(d.Log.String(), "code=internal") {
		t.Errorf("the daemon logged an internal error:\n%s", d.Log.Tail(4000))
	}
	if ps := d.ports("hib"); len(ps) != 1 || ps[0].Open || ps[0].HostAddr != addr || !strings.Contains(ps[0].Error, "sandbox stopped") {
		t.Errorf("forwards of the stopped sandbox: %+v; want the one at %s, closed, saying why", ps, addr)
	}
	e = d.apiError("POST", "/v1/sandboxes/hib/pause", "application/json", []byte(`{}`), http.StatusConflict, "conflict")
	if !strings.Contains(e.Message, "start it again") {
		t.Errorf("pause of a stopped sandbox: %q", e.Message)
	}
	if r := d.cli(nil, "start", "hib"); r.code != 0 {
		t.Fatalf("agentbox start: exit %d, %s", r.code, r.stderr)
	}
	// Every command line in the guest, searched with patterns that do not match themselves.
	if got := d.out(sb.ID, "sh", "-c", "cat /root/kept; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'http[.]server\\|time[.]sleep' || true"); got != "kept\n0\n" {
		t.Errorf("after start: %q, want the file and no process of before", got)
	}
	if ps := d.ports("hib"); len(ps) != 1 || !ps[0].Open || ps[0].HostAddr != addr {
		t.Errorf("forwards after start: %+v; want the one at %s, open", ps, addr)
	}
	d.httpServer(sb.ID, 8000, "127.0.0.1")
	served(t, addr, "after start")
	if got := strings.TrimSpace(d.out(sb.ID, fetch...)); got != hostHello {
		t.Errorf("after start: fetch from the host gave %q", got)
	}
	var acts []string
	for _, e := range d.audit(sb.ID) {
		if e.Action == "pause" || e.Action == "resume" || e.Action == "start" {
			acts = append(acts, e.Action+":"+e.Error)
		}
	}
	// The refused calls are audited with their error code.
	if want := "pause: resume: resume:conflict start:conflict pause: resume: pause: resume: pause:conflict start:"; strings.Join(acts, " ") != want {
		t.Errorf("audit actions %q, want %q", acts, want)
	}
	if strings.Contains(d.Log.String(), "cgroup of a stopped sandbox not removed") {
		t.Errorf("the daemon could not remove a cgroup:\n%s", d.Log.Tail(4000))
	}
}

// pausedCalls checks that every call on detached process proc of paused
// sandbox ref (output, stdin, kill, attach; a file watch) is refused 409
// sandbox_not_running with the resume hint, through the API and the
// CLI, and leaves the process alone.
func pausedCalls(t *testing.T, d *daemon, ref, proc, when string) {
	t.Helper()
	hint := "resume it first: agentbox resume " + ref
	base := "/v1/sandboxes/" + ref + "/processes/" + proc
	for _, c := range []struct{ method, path, ct, body string }{
		{"GET", base + "/output", "", ""},
		{"POST", base + "/stdin", "application/octet-stream", "x"},
		{"POST", base + "/kill", "application/json", `{"signal":"TERM"}`},
		{"GET", "/v1/sandboxes/" + ref + "/files/watch?path=/tmp", "", ""},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		if e := d.apiError(c.method, c.path, c.ct, body, http.StatusConflict, "sandbox_not_running"); !strings.Contains(e.Message, hint) {
			t.Errorf("%s: %s %s: %q, want the resume hint", when, c.method, c.path, e.Message)
		}
	}
	for _, args := range [][]string{{"output", ref, proc}, {"kill", ref, proc}, {"stdin", ref, proc}, {"attach", ref, proc}} {
		r := d.cli([]byte("x"), args...)
		if r.code != 125 || !strings.Contains(string(r.stderr), hint) || strings.Contains(string(r.stderr), "resume from offset") {
			t.Errorf("%s: agentbox %s: exit %d, %q; want 125 with the resume hint", when, strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

// TestDaemonIdlePauseToDisk: an idle timeout with idle_action
// pause-to-disk pauses the sandbox to disk instead of removing it; four
// concurrent execs with ?resume=true resume it once and all run; a bad
// idle action is refused.
func TestDaemonIdlePauseToDisk(t *testing.T) {
	d := startDaemon(t)
	d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, `"limits":{"idle_action":"sleep"}`)), http.StatusBadRequest, "invalid_argument")
	r := d.cli(nil, "create", "--image", imageDir(t), "--accel", "tcg", "--boot-timeout", "180s", "--name", "idler", "--memory", "256",
		"--idle-timeout", "3s", "--idle-action", "pause-to-disk", "--paused-ttl", "1h")
	if r.code != 0 {
		t.Fatalf("create: exit %d, %s", r.code, r.stderr)
	}
	d.Track(strings.TrimSpace(string(r.stdout)))
	if p := d.paused("idler"); p.Limits.IdleAction != "pause-to-disk" || p.Limits.PausedTTLSeconds != 3600 {
		t.Fatalf("limits %+v", p.Limits)
	}
	var p wirePaused
	testenv.WaitFor(t, 2*time.Minute, "the idle sandbox to be paused to disk", func() bool {
		p = d.paused("idler")
		return p.State == "paused"
	})
	if p.Paused == nil || !p.Paused.ToDisk {
		t.Fatalf("idle sandbox: %+v, want paused to disk", p)
	}
	// Four at once: one resumes it, the others wait for that and run too
	// (none is answered 409 because another resumed it first).
	const n = 4
	type answer struct {
		status int
		body   []byte
		err    error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()
			a := &answers[i]
			a.status, a.body, _, a.err = d.roundTrip(ctx, "POST", "/v1/sandboxes/idler/exec?resume=true", []byte(`{"cmd":["echo","awake"]}`), "application/json")
		})
	}
	wg.Wait()
	for i, a := range answers {
		// "awake\n" in base64, then the exit.
		if a.err != nil || a.status != http.StatusOK || !strings.Contains(string(a.body), `"type":"stdout","data":"YXdha2UK"`) || !strings.Contains(string(a.body), `"exit":{"exit_code":0`) {
			t.Fatalf("exec ?resume=true %d of %d: status %d, %v: %s", i+1, n, a.status, a.err, a.body)
		}
	}
	if p := d.paused("idler"); p.State != "running" {
		t.Fatalf("after exec ?resume=true: %+v", p)
	}
	var reap map[string]any
	for _, e := range d.audit("idler") {
		if e.Action == "reap" {
			reap = e.Args
		}
	}
	if reap["action"] != "pause-to-disk" || reap["reason"] != "idle timeout reached" {
		t.Errorf("reap audit args %v", reap)
	}
}
