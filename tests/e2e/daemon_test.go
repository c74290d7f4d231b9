package e2e

// Black-box tests of `agentbox serve`: the real daemon on a temp socket,
// driven through the CLI client commands and through raw HTTP, with real
// guests. They run one after the other (no t.Parallel): a 2-core TCG host
// boots one guest at a time best, and the concurrency test makes its own
// load. Every test ends with the daemon stopped and nothing of it left
// (daemon.cleanup).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// callerID is how the daemon names us as a unix socket peer.
var callerID = fmt.Sprintf("uid:%d", os.Getuid())

// randomBytes returns n random bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// hasSubsequence reports whether want appears in have in order (other
// elements may come between).
func hasSubsequence(have, want []string) bool {
	i := 0
	for _, h := range have {
		if i < len(want) && h == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestDaemonCLILifecycle drives a sandbox's whole life through the CLI
// client commands: create, exec (output, exit codes), cp both ways, ls,
// inspect, logs, audit (plain, JSON, replay), stop, exec on a stopped
// sandbox, rm.
func TestDaemonCLILifecycle(t *testing.T) {
	d := startDaemon(t)
	img := testenv.Image(t)

	r := d.cli(nil, "create", "--image", img, "--name", "work1", "--accel", "tcg")
	if r.code != 0 || !regexp.MustCompile(`^[0-9a-f]{12}\n$`).Match(r.stdout) || len(r.stderr) != 0 {
		t.Fatalf("create: exit %d, stdout %q, stderr %q; want 0 and a 12-hex ID", r.code, r.stdout, r.stderr)
	}
	id := strings.TrimSpace(string(r.stdout))
	d.Track(id)

	expect(t, d.cli(nil, "exec", "work1", "--", "python3", "-c", "print(1)"), 0, "1\n", "")
	expect(t, d.cli(nil, "exec", "work1", "--", "sh", "-c", "exit 3"), 3, "", "")
	expect(t, d.cli(nil, "exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 42"), 42, "out\n", "err\n")
	expect(t, d.cli([]byte("piped\n"), "exec", "work1", "--", "tr", "a-z", "A-Z"), 0, "PIPED\n", "")

	// cp in and back, byte-exact (every byte value, and random data).
	dir := t.TempDir()
	data := append(bytes.Repeat([]byte{0, 1, 2, 0xff, '\n', '\r'}, 100), randomBytes(200<<10)...)
	for i := range 256 {
		data = append(data, byte(i))
	}
	in, back := filepath.Join(dir, "in.bin"), filepath.Join(dir, "back.bin")
	if err := os.WriteFile(in, data, 0o640); err != nil {
		t.Fatal(err)
	}
	expect(t, d.cli(nil, "cp", in, "work1:/root/in.bin"), 0, "", "")
	expect(t, d.cli(nil, "exec", "work1", "--", "sha256sum", "/root/in.bin"), 0, sha(data)+"  /root/in.bin\n", "")
	expect(t, d.cli(nil, "cp", "work1:/root/in.bin", back), 0, "", "")
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("cp back: %d bytes (sha %s), %v; want the %d bytes sent (sha %s)", len(got), sha(got), err, len(data), sha(data))
	}

	// ls shows it running; inspect's JSON says so too.
	r = d.cli(nil, "ls")
	expect(t, r, 0, string(r.stdout), "")
	lines := strings.Split(strings.TrimSuffix(string(r.stdout), "\n"), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAME STATE IMAGE TEMPLATE CPUS MEMORY AGE" {
		t.Fatalf("ls: %q, want a header and one sandbox", r.stdout)
	}
	if f := strings.Fields(lines[1]); len(f) != 8 || f[0] != id || f[1] != "work1" || f[2] != "running" || f[4] != "-" {
		t.Fatalf("ls line %q: want %s work1 running, no template", lines[1], id)
	}
	expect(t, d.cli(nil, "ls", "-q"), 0, id+"\n", "")
	inspectState := func(want string) {
		t.Helper()
		r := d.cli(nil, "inspect", "work1")
		var sbs []wireSandbox
		if r.code != 0 || json.Unmarshal(r.stdout, &sbs) != nil || len(sbs) != 1 {
			t.Fatalf("inspect: exit %d, stdout %q, stderr %q: want a JSON array of one sandbox", r.code, r.stdout, r.stderr)
		}
		if sbs[0].ID != id || sbs[0].Name != "work1" || sbs[0].State != want || sbs[0].Domain != "agentbox-"+id {
			t.Fatalf("inspect: %+v, want %s work1 %s", sbs[0], id, want)
		}
	}
	inspectState("running")

	// logs: the serial console (the image boots with "quiet": the guest
	// agent's lines are the ones sure to be there).
	r = d.cli(nil, "logs", "work1")
	if r.code != 0 || !bytes.Contains(r.stdout, []byte("agentbox-guest: ready on /dev/vport0p1\r\n")) {
		t.Fatalf("logs: exit %d, stdout %q, stderr %q: want the guest console", r.code, r.stdout, r.stderr)
	}

	// audit: one entry per action, in the JSON and the plain form.
	r = d.cli(nil, "audit", "--json", "work1")
	if r.code != 0 {
		t.Fatalf("audit --json: exit %d, stderr %q", r.code, r.stderr)
	}
	var entries []wireAudit
	for _, l := range strings.Split(strings.TrimSuffix(string(r.stdout), "\n"), "\n") {
		var e wireAudit
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("audit --json line %q: %v", l, err)
		}
		wantCaller := callerID
		if e.Action == "process.exit" {
			wantCaller = "daemon"
		}
		if e.Sandbox != id || e.Caller != wantCaller {
			t.Errorf("audit entry %+v: want sandbox %s, caller %s", e, id, wantCaller)
		}
		entries = append(entries, e)
	}
	acts := actions(entries)
	// (exec with stdin streams it over the interactive exec: one exec
	// entry with the bytes it got, no detached process.)
	if want := []string{"create", "exec", "exec", "exec", "exec", "file.upload", "exec", "file.download"}; !hasSubsequence(acts, want) || acts[0] != "create" ||
		slices.Contains(acts, "process.start") || !slices.ContainsFunc(entries, func(e wireAudit) bool { return e.Action == "exec" && e.BytesIn == int64(len("piped\n")) }) {
		t.Fatalf("audit actions %v: want %v in this order, create first, and an exec with bytes_in %d", acts, want, len("piped\n"))
	}
	r = d.cli(nil, "audit", "work1")
	plain := strings.Split(strings.TrimSuffix(string(r.stdout), "\n"), "\n")
	if r.code != 0 || len(plain) != len(entries) {
		t.Fatalf("audit: exit %d, %d lines for %d entries: %q", r.code, len(plain), len(entries), r.stdout)
	}
	for i, l := range plain {
		if !strings.Contains(l, " "+entries[i].Action+" ") || !strings.Contains(l, id) {
			t.Errorf("audit line %q: want sandbox %s and action %s", l, id, entries[i].Action)
		}
	}
	r = d.cli(nil, "audit", "--replay", "work1")
	replay := string(r.stdout)
	if r.code != 0 || !strings.HasPrefix(replay, fmt.Sprintf("sandbox %s (work1) — %d actions", id, len(entries))) ||
		!strings.Contains(replay, "$ python3 -c 'print(1)'") || !strings.Contains(replay, "exit 42") || !strings.Contains(replay, "│ out") || !strings.Contains(replay, "! err") {
		t.Fatalf("audit --replay: exit %d, stderr %q:\n%s", r.code, r.stderr, replay)
	}

	// stop: the record stays, commands are refused with a message.
	expect(t, d.cli(nil, "stop", "work1"), 0, "work1\n", "")
	inspectState("stopped")
	r = d.cli(nil, "exec", "work1", "--", "true")
	if r.code != 125 || len(r.stdout) != 0 || !bytes.Contains(r.stderr, []byte("is stopped")) {
		t.Fatalf("exec in a stopped sandbox: exit %d, stdout %q, stderr %q; want 125 saying it is stopped", r.code, r.stdout, r.stderr)
	}

	expect(t, d.cli(nil, "rm", "work1"), 0, "work1\n", "")
	expect(t, d.cli(nil, "ls", "-q"), 0, "", "")
	r = d.cli(nil, "ls")
	if r.code != 0 || strings.Count(string(r.stdout), "\n") != 1 {
		t.Fatalf("ls after rm: exit %d, %q; want the header only", r.code, r.stdout)
	}
	d.assertGone(id)
}

// TestDaemonHTTPLifecycle drives a sandbox's whole life through the raw
// REST API: create, exec streams, files, console, audit, label and state
// filters, metrics, stop, delete.
func TestDaemonHTTPLifecycle(t *testing.T) {
	d := startDaemon(t)
	_, memory := imageResources(t)
	sb := d.create(createBody(t, `"name":"http1","labels":{"team":"blue","tier":"x"}`))
	if sb.Name != "http1" || sb.MemoryMiB != memory || sb.Accel != "tcg" || sb.Labels["team"] != "blue" || sb.Labels["tier"] != "x" || len(sb.Labels) != 2 {
		t.Fatalf("created %+v: want name http1, %d MiB, tcg, labels team=blue tier=x", sb, memory)
	}
	id := sb.ID
	base := "/v1/sandboxes/" + id

	// exec: output streams and exit codes, stdin, env and cwd.
	d.expectExec(id, `{"cmd":["sh","-c","echo out; echo err >&2; exit 7"]}`, 7, "out\n", "err\n")
	d.expectExec("http1", `{"cmd":["tr","a-z","A-Z"],"stdin":"aGVsbG8K"}`, 0, "HELLO\n", "")
	d.expectExec(id, `{"cmd":["sh","-c","echo $K:$(pwd)"],"env":["K=v w"],"cwd":"/tmp"}`, 0, "v w:/tmp\n", "")
	r := d.mustExec(id, `{"cmd":["no-such-command"]}`)
	if r.exit == nil || r.exit.ExitCode != 127 || r.exit.Error == "" {
		t.Fatalf("exec of a missing command: %+v %+v, want exit 127 with an error", r.exit, r.err)
	}

	// files: mkdir, upload, download, stat, list, remove.
	d.call("POST", base+"/files/mkdir", `{"path":"/work/sub","parents":true}`, http.StatusCreated)
	d.apiError("POST", base+"/files/mkdir", "application/json", []byte(`{"path":"/work/sub"}`), http.StatusConflict, "file_exists")
	data := append(randomBytes(64<<10), 0, '\n', 0xff)
	var fi wireFile
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	put, _ := http.NewRequestWithContext(ctx, "PUT", "http://agentbox"+base+"/files?path=/work/sub/a.bin&mode=0600", bytes.NewReader(data))
	put.Header.Set("Content-Type", "application/octet-stream")
	resp, err := d.HTTP.Do(put)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &fi) != nil {
		t.Fatalf("PUT file: %d %s", resp.StatusCode, body)
	}
	wantFile := wireFile{Name: "a.bin", Path: "/work/sub/a.bin", Type: "file", Size: int64(len(data)), Mode: "0600"}
	if fi != wantFile {
		t.Fatalf("PUT file answered %+v, want %+v", fi, wantFile)
	}
	got, hdr := d.call("GET", base+"/files?path=/work/sub/a.bin", nil, http.StatusOK)
	if !bytes.Equal(got, data) || hdr.Get("Content-Type") != "application/octet-stream" || hdr.Get("Content-Length") != fmt.Sprint(len(data)) || hdr.Get("X-Agentbox-Mode") != "0600" {
		t.Fatalf("GET file: %d bytes (want %d, equal %v), headers %v", len(got), len(data), bytes.Equal(got, data), hdr)
	}
	fi = wireFile{}
	d.callJSON("GET", base+"/files/stat?path=/work/sub/a.bin", nil, http.StatusOK, &fi)
	if fi != wantFile {
		t.Fatalf("stat: %+v, want %+v", fi, wantFile)
	}
	var fl struct {
		Files []wireFile `json:"files"`
	}
	d.callJSON("GET", base+"/files/list?path=/work/sub", nil, http.StatusOK, &fl)
	if len(fl.Files) != 1 || fl.Files[0] != wantFile {
		t.Fatalf("list /work/sub: %+v, want [%+v]", fl.Files, wantFile)
	}
	fl.Files = nil
	d.callJSON("GET", base+"/files/list?path=/work", nil, http.StatusOK, &fl)
	if len(fl.Files) != 1 || fl.Files[0].Name != "sub" || fl.Files[0].Path != "/work/sub" || fl.Files[0].Type != "dir" || fl.Files[0].Mode != "0755" {
		t.Fatalf("list /work: %+v, want the directory sub (0755)", fl.Files)
	}
	d.apiError("GET", base+"/files?path=/work/sub", "", nil, http.StatusUnprocessableEntity, "not_a_file")
	d.apiError("GET", base+"/files/list?path=/work/sub/a.bin", "", nil, http.StatusUnprocessableEntity, "not_a_directory")
	d.call("DELETE", base+"/files?path=/work/sub/a.bin", nil, http.StatusNoContent)
	d.apiError("GET", base+"/files/stat?path=/work/sub/a.bin", "", nil, http.StatusNotFound, "not_found")
	d.apiError("GET", base+"/files?path=/work/sub/a.bin", "", nil, http.StatusNotFound, "not_found")
	d.call("DELETE", base+"/files?path=/work&recursive=true", nil, http.StatusNoContent)
	d.apiError("GET", base+"/files/stat?path=/work", "", nil, http.StatusNotFound, "not_found")

	// console: the serial log as text; tail cuts it.
	console, hdr := d.call("GET", base+"/console", nil, http.StatusOK)
	if hdr.Get("Content-Type") != "text/plain; charset=utf-8" || !bytes.Contains(console, []byte("agentbox-guest: ready on /dev/vport0p1\r\n")) {
		t.Fatalf("console: %s %q", hdr.Get("Content-Type"), console)
	}
	if tail, _ := d.call("GET", base+"/console?tail=10", nil, http.StatusOK); len(tail) != 10 {
		t.Fatalf("console?tail=10: %q", tail)
	}

	// label and state filters.
	for q, want := range map[string][]string{
		"":                             {id},
		"label=team=blue":              {id},
		"label=team=blue&label=tier=x": {id},
		"label=team=red":               {},
		"label=team=blue&label=tier=y": {},
		"label=nosuchkey=blue":         {},
		"state=running":                {id},
		"state=stopped":                {},
		"label=team=blue&state=failed": {},
	} {
		if got := ids(d.list(q)); !slices.Equal(got, want) {
			t.Errorf("GET /v1/sandboxes?%s: %v, want %v", q, got, want)
		}
	}

	// metrics and info.
	metrics, _ := d.call("GET", "/metrics", nil, http.StatusOK)
	for _, want := range []string{`agentbox_sandboxes{state="running"} 1`, "\nagentbox_exec_duration_seconds_count 4\n", "agentbox_exec_duration_seconds_bucket{"} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
	var info struct {
		API      string `json:"api"`
		Capacity struct {
			UsedMemoryMiB int `json:"used_memory_mib"`
		} `json:"capacity"`
		Sandboxes map[string]int `json:"sandboxes"`
	}
	d.callJSON("GET", "/v1/info", nil, http.StatusOK, &info)
	if info.API != "v1" || info.Capacity.UsedMemoryMiB != memory || info.Sandboxes["running"] != 1 {
		t.Errorf("GET /v1/info: %+v, want api v1, %d MiB used, 1 running", info, memory)
	}

	// stop: twice is fine; exec is refused; the record stays.
	var st wireSandbox
	d.callJSON("POST", base+"/stop", nil, http.StatusOK, &st)
	if st.State != "stopped" {
		t.Fatalf("stop answered state %q", st.State)
	}
	d.callJSON("POST", base+"/stop", nil, http.StatusOK, &st)
	if got := d.get(id); got.State != "stopped" || got.ExecCount != 4 {
		t.Fatalf("after stop: %+v, want stopped with exec_count 4", got)
	}
	d.apiError("POST", base+"/exec", "application/json", []byte(`{"cmd":["true"]}`), http.StatusConflict, "sandbox_not_running")
	d.apiError("GET", base+"/files/stat?path=/", "", nil, http.StatusConflict, "sandbox_not_running")
	if got := ids(d.list("state=stopped")); !slices.Equal(got, []string{id}) {
		t.Errorf("?state=stopped: %v", got)
	}

	// audit: every action in order, by our uid.
	wantActs := []string{"create", "exec", "exec", "exec", "exec", "file.mkdir", "file.mkdir", "file.upload", "file.download",
		"file.stat", "file.list", "file.list", "file.download", "file.list", "file.remove", "file.stat", "file.download", "file.remove", "file.stat", "stop", "stop"}
	es := d.audit(id)
	if got := actions(es); !slices.Equal(got, wantActs) {
		t.Errorf("audit actions\n%v\nwant\n%v", got, wantActs)
	}
	for _, e := range es {
		if e.Sandbox != id || e.Caller != callerID {
			t.Errorf("audit entry %+v: want sandbox %s and caller %s", e, id, callerID)
		}
	}
	if len(es) > 1 && (es[1].ExitCode == nil || *es[1].ExitCode != 7 || es[1].ExecID == "") {
		t.Errorf("audit of the exit-7 exec: %+v", es[1])
	}

	// delete: 204, then 404 everywhere; the audit stays readable by ID.
	d.call("DELETE", base, nil, http.StatusNoContent)
	d.apiError("DELETE", base, "", nil, http.StatusNotFound, "not_found")
	d.apiError("GET", "/v1/sandboxes/http1", "", nil, http.StatusNotFound, "not_found")
	if got := actions(d.audit(id)); len(got) != len(wantActs)+1 || got[len(got)-1] != "remove" {
		t.Errorf("audit after delete: %v, want the earlier actions and remove", got)
	}
	if got := d.list(""); len(got) != 0 {
		t.Errorf("list after delete: %v", ids(got))
	}
	d.assertGone(id)
}

// TestDaemonParallelExecs runs 5 sandboxes at once, each running 20
// commands in parallel, and checks every output.
func TestDaemonParallelExecs(t *testing.T) {
	d := startDaemon(t)
	const boxes, execs = 5, 20
	sbs := make([]wireSandbox, boxes)
	var wg sync.WaitGroup
	errs := make(chan error, boxes*execs)
	bodies := make([]string, boxes)
	for i := range boxes {
		bodies[i] = createBody(t, fmt.Sprintf(`"name":"par%d","memory_mib":256`, i))
	}
	for i := range boxes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()
			st, body, _, err := d.roundTrip(ctx, "POST", "/v1/sandboxes", []byte(bodies[i]), "application/json")
			if err == nil && st != http.StatusCreated {
				err = fmt.Errorf("status %d: %s", st, body)
			}
			if err == nil {
				err = json.Unmarshal(body, &sbs[i])
			}
			if err != nil {
				errs <- fmt.Errorf("create par%d: %w", i, err)
				return
			}
			d.Track(sbs[i].ID)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	type outcome struct {
		box, n int
		res    execResult
		err    error
	}
	results := make(chan outcome, boxes*execs)
	for b := range boxes {
		for n := range execs {
			wg.Go(func() {
				token := fmt.Sprintf("box%d-exec%02d-%s", b, n, sbs[b].ID)
				r, err := d.exec(sbs[b].ID, fmt.Sprintf(`{"cmd":["echo",%q]}`, token))
				results <- outcome{b, n, r, err}
			})
		}
	}
	wg.Wait()
	close(results)
	ok := 0
	for o := range results {
		want := fmt.Sprintf("box%d-exec%02d-%s\n", o.box, o.n, sbs[o.box].ID)
		switch {
		case o.err != nil:
			t.Errorf("box %d exec %d: %v", o.box, o.n, o.err)
		case o.res.exit == nil || o.res.exit.ExitCode != 0 || string(o.res.stdout) != want || len(o.res.stderr) != 0:
			t.Errorf("box %d exec %d: status %d exit %+v err %+v stdout %q stderr %q; want %q", o.box, o.n, o.res.status, o.res.exit, o.res.err, o.res.stdout, o.res.stderr, want)
		default:
			ok++
		}
	}
	if ok != boxes*execs {
		t.Fatalf("%d of %d execs gave their exact output", ok, boxes*execs)
	}
	for _, sb := range sbs {
		if got := d.get(sb.ID); got.State != "running" || got.ExecCount != execs || got.MemoryMiB != 256 {
			t.Errorf("sandbox %s after the execs: %+v, want running, exec_count %d, 256 MiB", sb.ID, got, execs)
		}
		if n := len(d.audit(sb.ID)); n != 1+execs {
			t.Errorf("sandbox %s: %d audit entries, want %d", sb.ID, n, 1+execs)
		}
	}
	for _, sb := range sbs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()
			if st, body, _, err := d.roundTrip(ctx, "DELETE", "/v1/sandboxes/"+sb.ID+"?force=true", nil, ""); err != nil || st != http.StatusNoContent {
				t.Errorf("delete %s: %d %v %s", sb.ID, st, err, body)
			}
		})
	}
	wg.Wait()
	for _, sb := range sbs {
		d.assertGone(sb.ID)
	}
}

// readOutput reads a process output stream (GET .../output) until it ends
// or until stop says so; it returns the stdout bytes, the final exit (nil
// if none came) and the offsets of the data events.
func readOutput(t *testing.T, body io.Reader, startOffset int64, stop func(stdout []byte) bool) (stdout []byte, exit *wireExit, offsets []int64) {
	t.Helper()
	rd := bufio.NewReader(body)
	off := startOffset
	for {
		line, err := rd.ReadBytes('\n')
		if err == io.EOF && len(line) == 0 {
			return stdout, exit, offsets
		}
		if err != nil {
			t.Fatalf("output stream: %v (partial %q)", err, line)
		}
		if exit != nil {
			t.Fatalf("output event after the exit event: %q", line)
		}
		var ev wireEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("output event %q: %v", line, err)
		}
		switch ev.Type {
		case "stdout", "stderr":
			if ev.Offset != off {
				t.Fatalf("output event at offset %d, want %d: %q", ev.Offset, off, line)
			}
			off += int64(len(ev.Data))
			offsets = append(offsets, ev.Offset)
			if ev.Type == "stdout" {
				stdout = append(stdout, ev.Data...)
			}
			if stop != nil && stop(stdout) {
				return stdout, exit, offsets
			}
		case "exit":
			if ev.Exit == nil {
				t.Fatalf("exit event without exit: %q", line)
			}
			exit = ev.Exit
		default:
			t.Fatalf("unexpected output event %q", line)
		}
	}
}

// TestDaemonDetachedProcess starts a detached process with open stdin,
// feeds it later, reads its output without and with follow, and kills it.
func TestDaemonDetachedProcess(t *testing.T) {
	d := startDaemon(t)
	sb := d.create(createBody(t, `"memory_mib":256`))
	base := "/v1/sandboxes/" + sb.ID

	var p wireProcess
	hdr := d.callJSON("POST", base+"/processes", `{"cmd":["sh","-c","read a; echo got:$a; read b; echo got:$b; sleep 300"],"stdin_open":true}`, http.StatusCreated, &p)
	if p.ID == "" || p.Pid <= 0 || p.State != "running" || !p.StdinOpen || len(p.Cmd) != 3 || p.Cmd[2] != "read a; echo got:$a; read b; echo got:$b; sleep 300" || p.Exit != nil {
		t.Fatalf("started process %+v", p)
	}
	if loc := hdr.Get("Location"); loc != base+"/processes/"+p.ID {
		t.Errorf("Location %q", loc)
	}
	pbase := base + "/processes/" + p.ID
	var pl struct {
		Processes []wireProcess `json:"processes"`
	}
	d.callJSON("GET", base+"/processes", nil, http.StatusOK, &pl)
	if len(pl.Processes) != 1 || pl.Processes[0].ID != p.ID {
		t.Fatalf("process list %+v", pl.Processes)
	}

	// Nothing read yet: the output is empty, and no exit.
	out, _ := d.call("GET", pbase+"/output", nil, http.StatusOK)
	if len(out) != 0 {
		t.Fatalf("output before any stdin: %q", out)
	}

	var sr struct {
		Bytes int64 `json:"bytes"`
	}
	d.callJSON("POST", pbase+"/stdin", octets("x\n"), http.StatusOK, &sr)
	if sr.Bytes != 2 {
		t.Fatalf("stdin answered %d bytes, want 2", sr.Bytes)
	}
	var stdout []byte
	testenv.WaitFor(t, 30*time.Second, `"got:x" in the output`, func() bool {
		body, _ := d.call("GET", pbase+"/output", nil, http.StatusOK)
		var exit *wireExit
		stdout, exit, _ = readOutput(t, bytes.NewReader(body), 0, nil)
		if exit != nil {
			t.Fatalf("the process exited early: %+v", exit)
		}
		return len(stdout) > 0
	})
	if string(stdout) != "got:x\n" {
		t.Fatalf("output after the first line of stdin: %q, want %q", stdout, "got:x\n")
	}

	d.callJSON("POST", pbase+"/stdin?close=true", octets("y\n"), http.StatusOK, &sr)
	if sr.Bytes != 2 {
		t.Fatalf("stdin answered %d bytes, want 2", sr.Bytes)
	}
	d.apiError("POST", pbase+"/stdin", "application/octet-stream", []byte("z\n"), http.StatusConflict, "stdin_closed")
	var got wireProcess
	d.callJSON("GET", pbase, nil, http.StatusOK, &got)
	if got.StdinOpen || got.State != "running" {
		t.Fatalf("process after closing stdin: %+v, want running with stdin closed", got)
	}

	// Follow from offset 6 until the second line arrives.
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://agentbox"+pbase+"/output?follow=true&offset=6", nil)
	resp, err := d.HTTP.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("follow output: %v %v", resp, err)
	}
	stdout, exit, offsets := readOutput(t, resp.Body, 6, func(b []byte) bool { return bytes.Contains(b, []byte("\n")) })
	cancel()
	resp.Body.Close()
	if string(stdout) != "got:y\n" || exit != nil || len(offsets) == 0 || offsets[0] != 6 {
		t.Fatalf("followed output from 6: %q (offsets %v, exit %+v), want \"got:y\\n\" from offset 6", stdout, offsets, exit)
	}

	// Kill: the whole group dies of SIGKILL; a follow from the end sees
	// only the exit.
	d.call("POST", pbase+"/kill", `{"signal":"KILL"}`, http.StatusNoContent)
	ctx, cancel = context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "GET", "http://agentbox"+pbase+"/output?follow=true&offset=12", nil)
	resp, err = d.HTTP.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("follow output after kill: %v %v", resp, err)
	}
	stdout, exit, _ = readOutput(t, resp.Body, 12, nil)
	resp.Body.Close()
	if len(stdout) != 0 || exit == nil || exit.ExitCode != 137 || exit.Signal != 9 {
		t.Fatalf("output after kill: %q, exit %+v; want only an exit with code 137, signal 9", stdout, exit)
	}
	got = wireProcess{}
	d.callJSON("GET", pbase, nil, http.StatusOK, &got)
	if got.State != "exited" || got.Exit == nil || got.Exit.ExitCode != 137 || got.Exit.Signal != 9 || got.OutputBytes != 12 || got.EndedAt == nil {
		t.Fatalf("process after kill: %+v (exit %+v); want exited, 137, signal 9, 12 output bytes, ended_at", got, got.Exit)
	}
	body, _ := d.call("GET", pbase+"/output", nil, http.StatusOK)
	if stdout, exit, _ = readOutput(t, bytes.NewReader(body), 0, nil); string(stdout) != "got:x\ngot:y\n" || exit == nil || exit.ExitCode != 137 {
		t.Fatalf("whole output after exit: %q %+v", stdout, exit)
	}
	d.apiError("POST", pbase+"/kill", "application/json", []byte(`{}`), http.StatusConflict, "process_exited")
	d.apiError("GET", base+"/processes/nosuchproc", "", nil, http.StatusNotFound, "not_found")

	// The log holds entries in the order the actions ended: the exit and
	// the kill that caused it may come either way; by start time they
	// cannot.
	es := d.audit(sb.ID)
	slices.SortStableFunc(es, func(a, b wireAudit) int { return a.Time.Compare(b.Time) })
	if want := []string{"create", "process.start", "process.stdin", "process.stdin", "process.stdin", "process.kill", "process.exit", "process.kill"}; !slices.Equal(actions(es), want) {
		t.Errorf("audit actions %v, want %v", actions(es), want)
	}
	for _, e := range es {
		if e.Action == "process.exit" && (e.ExitCode == nil || *e.ExitCode != 137 || e.ExecID != p.ID) {
			t.Errorf("process.exit audit entry %+v: want exit 137 of %s", e, p.ID)
		}
	}
}

// TestDaemonLargeFile moves a 50 MiB random file in and out byte-exact,
// through raw HTTP and through `agentbox cp`.
func TestDaemonLargeFile(t *testing.T) {
	d := startDaemon(t)
	sb := d.create(createBody(t, `"name":"big"`))
	base := "/v1/sandboxes/" + sb.ID
	data := randomBytes(50 << 20)
	sum := sha(data)

	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	put, _ := http.NewRequestWithContext(ctx, "PUT", "http://agentbox"+base+"/files?path=/root/big.bin", bytes.NewReader(data))
	put.Header.Set("Content-Type", "application/octet-stream")
	resp, err := d.HTTP.Do(put)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var fi wireFile
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &fi) != nil || fi.Size != int64(len(data)) || fi.Mode != "0644" {
		t.Fatalf("PUT 50 MiB: %d %s", resp.StatusCode, body)
	}
	d.expectExec(sb.ID, `{"cmd":["sha256sum","/root/big.bin"]}`, 0, sum+"  /root/big.bin\n", "")
	got, _ := d.call("GET", base+"/files?path=/root/big.bin", nil, http.StatusOK)
	if len(got) != len(data) || sha(got) != sum {
		t.Fatalf("GET 50 MiB: %d bytes, sha256 %s; want %d, %s", len(got), sha(got), len(data), sum)
	}

	dir := t.TempDir()
	in, back := filepath.Join(dir, "in.bin"), filepath.Join(dir, "back.bin")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	expect(t, d.cli(nil, "cp", in, "big:/root/big2.bin"), 0, "", "")
	d.expectExec(sb.ID, `{"cmd":["sh","-c","sha256sum </root/big2.bin; stat -c %s /root/big2.bin"]}`, 0, sum+"  -\n52428800\n", "")
	expect(t, d.cli(nil, "cp", "big:/root/big2.bin", back), 0, "", "")
	if b, err := os.ReadFile(back); err != nil || len(b) != len(data) || sha(b) != sum {
		t.Fatalf("cp back 50 MiB: %d bytes, sha256 %s, %v", len(b), sha(b), err)
	}
	var up, down int64
	for _, e := range d.audit(sb.ID) {
		switch e.Action {
		case "file.upload":
			up += e.BytesIn
		case "file.download":
			down += e.BytesOut
		}
	}
	if up != 2*int64(len(data)) || down != 2*int64(len(data)) {
		t.Errorf("audit counts %d bytes uploaded and %d downloaded, want %d each", up, down, 2*len(data))
	}
}

// snapshot is what bad requests must leave unchanged: the sandbox list
// and the daemon's sandbox and runtime directories.
func (d *daemon) snapshot() string {
	d.t.Helper()
	var b strings.Builder
	for _, sb := range d.list("") {
		fmt.Fprintf(&b, "%s %s %s %d\n", sb.ID, sb.Name, sb.State, sb.ExecCount)
	}
	for _, dir := range []string{filepath.Join(d.State, "sandboxes"), d.Runtime} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			fmt.Fprintf(&b, "%s/%s\n", dir, e.Name())
		}
	}
	return b.String()
}

// TestDaemonBadInput sends malformed and hostile requests: each gets its
// exact 4xx status and error code, and nothing changes.
func TestDaemonBadInput(t *testing.T) {
	d := startDaemon(t)
	sb := d.create(createBody(t, `"name":"taken","memory_mib":256`))
	base := "/v1/sandboxes/" + sb.ID
	guestState := `{"cmd":["sh","-c","sha256sum /etc/passwd; ls -a / /root /tmp"]}`
	before := d.mustExec(sb.ID, guestState)
	snap := d.snapshot()
	audited := len(d.audit(sb.ID))
	img, _ := json.Marshal(testenv.Image(t))
	noManifest, _ := json.Marshal(t.TempDir())
	huge := `{"image":` + string(img) + `,"labels":{"a":"` + strings.Repeat("x", 1<<20) + `"}}`
	long := strings.Repeat("a", 300)

	const jsonCT, raw = "application/json", "application/octet-stream"
	cases := []struct {
		method, path, ctype, body string
		status                    int
		code                      string
	}{
		{"POST", "/v1/sandboxes", jsonCT, `{"image":` + string(img) + `,"name":`, 400, "bad_request"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":` + string(img) + `,"nmae":"x"}`, 400, "bad_request"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":` + string(img) + `,"Name":"x"}`, 400, "bad_request"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":` + string(img) + `,"memory_mib":"512"}`, 400, "bad_request"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":` + string(img) + `,"limits":{"ttl_seconds":1.5}}`, 400, "bad_request"},
		{"POST", "/v1/sandboxes", jsonCT, `["image"]`, 400, "bad_request"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":` + string(img) + `}{}`, 400, "bad_request"},
		{"POST", "/v1/sandboxes", jsonCT, ``, 400, "bad_request"},
		{"POST", "/v1/sandboxes", jsonCT, huge, 413, "payload_too_large"},
		{"POST", "/v1/sandboxes", "text/plain", `{"image":` + string(img) + `}`, 415, "unsupported_media"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":` + string(img) + `,"memory_mib":-1}`, 400, "invalid_argument"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":` + string(img) + `,"name":"../x"}`, 400, "invalid_argument"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":` + string(img) + `,"name":"0123456789ab"}`, 400, "invalid_argument"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":"relative/dir"}`, 400, "invalid_argument"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":"/nonexistent/agentbox/image"}`, 422, "invalid_image"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":` + string(noManifest) + `}`, 422, "invalid_image"},
		{"POST", "/v1/sandboxes", jsonCT, `{"image":` + string(img) + `,"accel":"tcg","name":"taken"}`, 409, "name_taken"},
		{"DELETE", base, "", "", 409, "sandbox_running"},
		{"DELETE", "/v1/sandboxes/taken?force=maybe", "", "", 400, "bad_request"},
		{"GET", "/v1/sandboxes?bogus=1", "", "", 400, "bad_request"},
		{"GET", "/v1/sandboxes?label=noequals", "", "", 400, "invalid_argument"},
		{"GET", "/v1/sandboxes?state=sleeping", "", "", 400, "invalid_argument"},

		{"POST", base + "/exec", jsonCT, `{"cmd":"echo hi"}`, 400, "bad_request"},
		{"POST", base + "/exec", jsonCT, `{"cmd":["true"],"bogus":1}`, 400, "bad_request"},
		{"POST", base + "/exec", jsonCT, `{"cmd":[]}`, 400, "invalid_argument"},
		{"POST", base + "/exec", jsonCT, `{"cmd":["a\u0000b"]}`, 400, "invalid_argument"},
		{"POST", base + "/exec", jsonCT, `{"cmd":["true"],"cwd":"tmp"}`, 400, "invalid_argument"},
		{"POST", base + "/exec", jsonCT, `{"cmd":["true"],"stdin":"not base64!"}`, 400, "bad_request"},
		{"POST", base + "/exec", jsonCT, `{"cmd":["true"],"stdin_open":true}`, 400, "invalid_argument"},

		// Path traversal and malformed paths in files routes.
		{"GET", base + "/files?path=../etc/passwd", "", "", 400, "invalid_argument"},
		{"GET", base + "/files?path=etc/passwd", "", "", 400, "invalid_argument"},
		{"GET", base + "/files?path=/root/../etc/shadow", "", "", 400, "invalid_argument"},
		{"GET", base + "/files?path=%2Fetc%2Fpasswd%00.txt", "", "", 400, "invalid_argument"},
		{"GET", base + "/files?path=", "", "", 400, "invalid_argument"},
		{"GET", base + "/files?path=/" + strings.Repeat("a/", 2100), "", "", 400, "invalid_argument"},
		{"PUT", base + "/files?path=../evil", raw, "evil", 400, "invalid_argument"},
		{"PUT", base + "/files?path=/tmp/../evil", raw, "evil", 400, "invalid_argument"},
		{"PUT", base + "/files?path=/tmp/evil%00", raw, "evil", 400, "invalid_argument"},
		{"PUT", base + "/files?path=/tmp/evil&mode=999", raw, "evil", 400, "invalid_argument"},
		{"DELETE", base + "/files?path=/", "", "", 400, "invalid_argument"},
		{"DELETE", base + "/files?path=/etc/..&recursive=true", "", "", 400, "invalid_argument"},
		{"GET", base + "/files/stat?path=relative", "", "", 400, "invalid_argument"},
		{"GET", base + "/files/list?path=/..", "", "", 400, "invalid_argument"},
		{"POST", base + "/files/mkdir", jsonCT, `{"path":"../../x"}`, 400, "invalid_argument"},
		{"POST", base + "/files/mkdir", jsonCT, `{"path":"/tmp/x","mode":"rwx"}`, 400, "invalid_argument"},

		// Path traversal and malformed sandbox references in URLs.
		{"GET", "/v1/sandboxes/..%2F..", "", "", 400, "invalid_argument"},
		{"GET", "/v1/sandboxes/..%2F..%2Fetc%2Fpasswd/files?path=/etc/passwd", "", "", 400, "invalid_argument"},
		{"DELETE", "/v1/sandboxes/%2E%2E?force=true", "", "", 400, "invalid_argument"},
		{"GET", "/v1/sandboxes/" + sb.ID + "%2F..%2F" + sb.ID, "", "", 400, "invalid_argument"},
		{"GET", "/v1/sandboxes/" + long, "", "", 400, "invalid_argument"},
		{"DELETE", "/v1/sandboxes/" + long + "?force=true", "", "", 400, "invalid_argument"},
		{"GET", "/v1/sandboxes/a%00b", "", "", 400, "invalid_argument"},
		{"GET", "/v1/sandboxes/-rf", "", "", 400, "invalid_argument"},
		{"GET", "/v1/sandboxes/nosuchbox", "", "", 404, "not_found"},
		{"GET", "/v1/sandboxes/000000000000", "", "", 404, "not_found"},
		{"POST", "/v1/sandboxes/nosuchbox/exec", jsonCT, `{"cmd":["true"]}`, 404, "not_found"},
		{"GET", base + "/processes/..%2F..", "", "", 400, "invalid_argument"},
		{"GET", base + "/processes/UPPER", "", "", 400, "invalid_argument"},
		{"GET", "/v1/nosuchroute", "", "", 404, "not_found"},
		{"PATCH", base, jsonCT, `{}`, 405, "method_not_allowed"},
	}
	for _, c := range cases {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		d.apiError(c.method, c.path, c.ctype, body, c.status, c.code)
	}
	if after := d.snapshot(); after != snap {
		t.Errorf("bad requests changed the daemon's state:\nbefore\n%s\nafter\n%s", snap, after)
	}
	// Of all that, only the delete without force reached the sandbox (and
	// was refused there); its files are unchanged and it still works.
	if es := d.audit(sb.ID)[audited:]; len(es) != 1 || es[0].Action != "remove" || es[0].Error != "sandbox_running" {
		t.Errorf("audit entries of the bad requests: %+v; want only the refused remove", es)
	}
	if after := d.mustExec(sb.ID, guestState); after.exit == nil || after.exit.ExitCode != 0 || !bytes.Equal(after.stdout, before.stdout) {
		t.Errorf("guest files changed:\nbefore %q\nafter  %q (%+v)", before.stdout, after.stdout, after.exit)
	}
	if got := d.get("taken"); got.ID != sb.ID || got.State != "running" {
		t.Errorf("sandbox after the bad requests: %+v", got)
	}
}

// TestDaemonTCPAuth: TCP without a token is refused at start; with one,
// requests need the exact bearer token.
func TestDaemonTCPAuth(t *testing.T) {
	// Without --token-file (or TLS) the daemon refuses to start, before it
	// listens anywhere.
	nd := newDaemon(t)
	cmd := exec.Command(agentboxBin, append(nd.ServeArgs(), "--listen-tcp", "127.0.0.1:0")...)
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=", "AGENTBOX_TOKEN_FILE=")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 || !strings.Contains(string(out), "token") {
		t.Fatalf("serve --listen-tcp without a token: %v, %q; want a non-zero exit mentioning the token", err, out)
	}
	if left, _ := os.ReadDir(nd.SockDir); len(left) != 0 {
		t.Fatalf("the refused daemon left %s", left[0].Name())
	}

	token := hex.EncodeToString(randomBytes(32))
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, "--listen-tcp", "127.0.0.1:0")
	d.Globals = []string{"--token-file", tokenFile}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	// The listeners start serving concurrently: the unix one answered;
	// the TCP one names its port in the log.
	var m []string
	testenv.WaitFor(t, 30*time.Second, "the TCP listener's address in the daemon's log", func() bool {
		m = regexp.MustCompile(`msg="API listening" network=tcp addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(d.Log.String())
		return m != nil
	})
	addr := m[1]
	tcp := &http.Client{Timeout: time.Minute}
	get := func(auth string) (int, []byte, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/info", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := tcp.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header
	}
	wrong := token[:len(token)-1] + "0"
	if wrong == token {
		wrong = token[:len(token)-1] + "1"
	}
	for _, auth := range []string{"", "Bearer " + wrong, "Bearer " + token + "x", "Bearer", "Basic " + token, token} {
		st, body, hdr := get(auth)
		var e wireErrorBody
		if st != http.StatusUnauthorized || json.Unmarshal(body, &e) != nil || e.Error.Code != "unauthorized" || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: %d %s %v; want 401 unauthorized with WWW-Authenticate", auth, st, body, hdr)
		}
	}
	st, body, _ := get("Bearer " + token)
	var info struct {
		API string `json:"api"`
	}
	if st != http.StatusOK || json.Unmarshal(body, &info) != nil || info.API != "v1" {
		t.Fatalf("right token: %d %s", st, body)
	}
	// The unix socket needs no token; the CLI reaches the TCP listener
	// with --host and --token-file.
	d.callJSON("GET", "/v1/info", nil, http.StatusOK, &info)
	c := exec.Command(agentboxBin, "--host", "http://"+addr, "--token-file", tokenFile, "ls", "-q")
	c.Env = append(os.Environ(), "AGENTBOX_CONFIG=")
	if out, err := c.CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("agentbox --host ls -q: %v %q", err, out)
	}
	// No sandbox got created by any of it.
	if got := d.list(""); len(got) != 0 {
		t.Fatalf("sandboxes: %v", ids(got))
	}
	if es := d.audit(""); len(es) != 0 {
		t.Fatalf("audit entries: %+v", es)
	}
}

// TestDaemonKill9 covers sandboxes whose daemon or domain goes away:
//   - a domain destroyed behind the running daemon's back is marked failed
//     with the reason, and stays so across a restart;
//   - kill -9 of the daemon while a sandbox runs a streaming exec: the
//     restarted daemon adopts the sandbox and exec works again;
//   - a domain destroyed while the daemon is down: the restarted daemon
//     marks it failed ("domain vanished while the daemon was down");
//   - an adopted sandbox whose domain is then destroyed is marked failed.
func TestDaemonKill9(t *testing.T) {
	d := startDaemon(t)
	a := d.create(createBody(t, `"name":"adoptme","memory_mib":256`))
	b := d.create(createBody(t, `"name":"destroyed","memory_mib":256`))
	c := d.create(createBody(t, `"name":"vanish","memory_mib":256`))
	d.expectExec(a.ID, `{"cmd":["sh","-c","echo before > /root/mark"]}`, 0, "", "")

	// A domain destroyed behind the running daemon's back.
	if out, err := testenv.DestroyDomain(b.Domain); err != nil {
		t.Fatalf("virsh destroy %s: %v %s", b.Domain, err, out)
	}
	var failedB wireSandbox
	testenv.WaitFor(t, 30*time.Second, "the destroyed sandbox to leave state running", func() bool {
		failedB = d.get(b.ID)
		return failedB.State != "running"
	})
	if failedB.State != "failed" || !strings.HasPrefix(failedB.Reason, "domain stopped unexpectedly") {
		t.Fatalf("sandbox whose domain was destroyed: state %q, reason %q; want failed, domain stopped unexpectedly", failedB.State, failedB.Reason)
	}
	d.apiError("POST", "/v1/sandboxes/destroyed/exec", "application/json", []byte(`{"cmd":["true"]}`), http.StatusConflict, "sandbox_not_running")

	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	s, err := d.startExec(ctx, a.ID, `{"cmd":["sh","-c","for i in $(seq 100); do echo $i; sleep 0.1; done"]}`)
	if err != nil || s.res.status != http.StatusOK {
		t.Fatalf("streaming exec: %v %+v", err, s)
	}
	for len(s.res.stdout) < 2 {
		if _, err := s.next(); err != nil {
			t.Fatalf("streaming exec before the kill: %v", err)
		}
	}
	if !bytes.HasPrefix(s.res.stdout, []byte("1\n")) {
		t.Fatalf("stream began with %q", s.res.stdout)
	}
	d.Kill9()
	for {
		_, err := s.next()
		if err == nil {
			continue
		}
		if err == io.EOF || s.res.exit != nil {
			t.Fatalf("the stream ended cleanly (exit %+v) though the daemon was killed", s.res.exit)
		}
		break
	}
	if out, err := testenv.DestroyDomain(c.Domain); err != nil {
		t.Fatalf("virsh destroy %s: %v %s", c.Domain, err, out)
	}

	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	sbs := d.list("")
	if len(sbs) != 3 || sbs[0].ID != a.ID || sbs[0].State != "running" ||
		sbs[1].ID != b.ID || sbs[1].State != "failed" || sbs[1].Reason != failedB.Reason ||
		sbs[2].ID != c.ID || sbs[2].State != "failed" || sbs[2].Reason != "domain vanished while the daemon was down" {
		t.Fatalf("after restart: %+v; want %s running, %s failed (%s), %s failed (domain vanished while the daemon was down)", sbs, a.ID, b.ID, failedB.Reason, c.ID)
	}
	if got := d.get("adoptme"); got.ID != a.ID || got.State != "running" {
		t.Fatalf("adopted sandbox %+v: want running", got)
	} else {
		t.Logf("adopted sandbox's exec_count: %d (2 commands were started before the kill)", got.ExecCount)
	}
	d.expectExec("adoptme", `{"cmd":["cat","/root/mark"]}`, 0, "before\n", "")
	d.expectExec(a.ID, `{"cmd":["sh","-c","echo adopted; echo e >&2; exit 5"]}`, 5, "adopted\n", "e\n")
	d.apiError("POST", "/v1/sandboxes/vanish/exec", "application/json", []byte(`{"cmd":["true"]}`), http.StatusConflict, "sandbox_not_running")
	acts := map[string]string{}
	for _, e := range d.audit("") {
		if e.Action == "reconcile" {
			acts[e.Sandbox] = fmt.Sprint(e.Args["result"])
		}
	}
	if acts[a.ID] != "adopted" || acts[c.ID] != "failed" {
		t.Errorf("reconcile audit entries: %v; want %s adopted, %s failed", acts, a.ID, c.ID)
	}

	// Failed ones go with a plain DELETE (they do not run).
	for _, sb := range []wireSandbox{b, c} {
		d.call("DELETE", "/v1/sandboxes/"+sb.ID, nil, http.StatusNoContent)
		d.assertGone(sb.ID)
	}

	// The adopted sandbox's domain destroyed behind the daemon's back.
	if out, err := testenv.DestroyDomain(a.Domain); err != nil {
		t.Fatalf("virsh destroy %s: %v %s", a.Domain, err, out)
	}
	var got wireSandbox
	testenv.WaitFor(t, 30*time.Second, "the destroyed sandbox to leave state running", func() bool {
		got = d.get(a.ID)
		return got.State != "running"
	})
	if got.State != "failed" || !strings.HasPrefix(got.Reason, "domain stopped unexpectedly") {
		t.Fatalf("sandbox whose domain was destroyed: state %q, reason %q; want failed, domain stopped unexpectedly", got.State, got.Reason)
	}
	d.apiError("POST", "/v1/sandboxes/"+a.ID+"/exec", "application/json", []byte(`{"cmd":["true"]}`), http.StatusConflict, "sandbox_not_running")
	d.call("DELETE", "/v1/sandboxes/"+a.ID, nil, http.StatusNoContent)
	d.assertGone(a.ID)
}

// TestDaemonReap: the TTL and the idle timeout remove sandboxes, and the
// audit log says why.
func TestDaemonReap(t *testing.T) {
	d := startDaemon(t)
	ttl := d.create(createBody(t, `"memory_mib":256,"limits":{"ttl_seconds":3}`))
	idle := d.create(createBody(t, `"memory_mib":256,"limits":{"idle_timeout_seconds":3}`))
	if ttl.Limits.TTLSeconds != 3 || idle.Limits.IdleTimeoutSeconds != 3 {
		t.Errorf("limits in the create answers: %+v, %+v", ttl.Limits, idle.Limits)
	}
	for _, c := range []struct {
		sb     wireSandbox
		reason string
	}{{ttl, "ttl reached"}, {idle, "idle timeout reached"}} {
		testenv.WaitFor(t, time.Minute, "sandbox "+c.sb.ID+" to be reaped ("+c.reason+")", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()
			st, _, _, err := d.roundTrip(ctx, "GET", "/v1/sandboxes/"+c.sb.ID, nil, "")
			return err == nil && st == http.StatusNotFound
		})
		d.assertGone(c.sb.ID)
		es := d.auditEndsWith(c.sb.ID, "reap")
		last := es[len(es)-1]
		if last.Action != "reap" || last.Caller != "daemon" || last.Args["reason"] != c.reason || last.Error != "" {
			t.Errorf("last audit entry of %s: %+v; want reap by daemon, reason %q", c.sb.ID, last, c.reason)
		}
	}
	metrics, _ := d.call("GET", "/metrics", nil, http.StatusOK)
	for _, want := range []string{`agentbox_sandboxes_reaped_total{reason="ttl reached"} 1`, `agentbox_sandboxes_reaped_total{reason="idle timeout reached"} 1`} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestDaemonCapacity: with room for one sandbox of the image's size, the
// second create gets 429 with the numbers; after removing the first it
// succeeds.
func TestDaemonCapacity(t *testing.T) {
	vcpus, memory := imageResources(t)
	capacity := memory + memory/2
	d := startDaemon(t, "--capacity-memory", fmt.Sprint(capacity))
	a := d.create(createBody(t, ""))
	if a.MemoryMiB != memory || a.VCPUs != vcpus {
		t.Fatalf("sandbox of the image's defaults: %d MiB, %d vCPUs; want %d, %d", a.MemoryMiB, a.VCPUs, memory, vcpus)
	}
	snap := d.snapshot()
	e := d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, `"name":"second"`)), http.StatusTooManyRequests, "capacity_exceeded")
	for k, want := range map[string]int{"requested_memory_mib": memory, "used_memory_mib": memory, "capacity_memory_mib": capacity, "requested_vcpus": vcpus, "used_vcpus": vcpus} {
		if got, ok := e.Details[k].(float64); !ok || int(got) != want {
			t.Errorf("429 details[%s] = %v, want %d (details %v)", k, e.Details[k], want, e.Details)
		}
	}
	if !strings.Contains(e.Message, fmt.Sprint(capacity)) {
		t.Errorf("429 message %q does not give the capacity %d", e.Message, capacity)
	}
	if after := d.snapshot(); after != snap {
		t.Errorf("the refused create changed the state:\n%s\nvs\n%s", snap, after)
	}
	metrics, _ := d.call("GET", "/metrics", nil, http.StatusOK)
	if !bytes.Contains(metrics, []byte("agentbox_admission_refused_total 1\n")) || !bytes.Contains(metrics, []byte(fmt.Sprintf(`agentbox_committed{resource="memory_mib"} %d`, memory))) {
		t.Errorf("metrics lack the refusal or the committed memory")
	}

	d.call("DELETE", "/v1/sandboxes/"+a.ID+"?force=true", nil, http.StatusNoContent)
	d.assertGone(a.ID)
	b := d.create(createBody(t, `"name":"second"`))
	d.expectExec("second", `{"cmd":["echo","fits"]}`, 0, "fits\n", "")
	d.call("DELETE", "/v1/sandboxes/"+b.ID+"?force=true", nil, http.StatusNoContent)
}

// TestDaemonRunUsesDaemon: `agentbox run` goes through the daemon at
// $AGENTBOX_SOCKET when one answers there; `run --local` does not.
func TestDaemonRunUsesDaemon(t *testing.T) {
	d := startDaemon(t)
	img := testenv.Image(t)
	// Local state dirs that `run` must not touch when it uses the daemon.
	state, runtime := t.TempDir(), testenv.ShortTempDir(t)
	t.Cleanup(func() { testenv.AssertNoLeaks(t, state, runtime) })
	run := func(extra ...string) result {
		args := append([]string{"--uri", testenv.URI(), "--state-dir", state, "--runtime-dir", runtime, "run", "--image", img, "--accel", "tcg"}, extra...)
		args = append(args, "--", "sh", "-c", "echo hi; echo there >&2")
		cmd := exec.Command(agentboxBin, args...)
		cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=", "AGENTBOX_HOST=", "AGENTBOX_SOCKET="+d.Socket)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{stdout.Bytes(), stderr.Bytes(), code}
	}

	expect(t, run(), 0, "hi\n", "there\n")
	es := d.audit("")
	if len(es) != 3 || es[0].Action != "create" || es[1].Action != "exec" || es[2].Action != "remove" ||
		es[0].Sandbox == "" || es[1].Sandbox != es[0].Sandbox || es[2].Sandbox != es[0].Sandbox || es[1].ExitCode == nil || *es[1].ExitCode != 0 {
		t.Fatalf("daemon audit after `run`: %+v; want create, exec (exit 0), remove of one sandbox", es)
	}
	d.Track(es[0].Sandbox)
	d.assertGone(es[0].Sandbox)
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("`run` through the daemon wrote to its local state dir: %v", ents)
	}

	expect(t, run("--local"), 0, "hi\n", "there\n")
	if n := len(d.audit("")); n != 3 {
		t.Fatalf("`run --local` reached the daemon: %d audit entries, want still 3", n)
	}
	if got := d.list(""); len(got) != 0 {
		t.Fatalf("sandboxes left: %v", ids(got))
	}
}

// TestDaemonRunKilled: a `run` through the daemon killed with kill -9
// mid-command cannot remove its sandbox; the daemon's reaper does, a
// minute after the command ended (the run's idle timeout), and audits
// why.
func TestDaemonRunKilled(t *testing.T) {
	d := startDaemon(t)
	cmd := exec.Command(agentboxBin, "--uri", testenv.URI(), "run", "--image", testenv.Image(t), "--accel", "tcg", "--memory", "256",
		"--", "sh", "-c", "echo started; exec sleep 300")
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=", "AGENTBOX_HOST=", "AGENTBOX_SOCKET="+d.Socket)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("first line %q, %v; stderr %s", line, err, &stderr)
	}
	sbs := d.list("label=agentbox.run=1")
	if len(sbs) != 1 || sbs[0].Limits.IdleTimeoutSeconds != 60 || sbs[0].Limits.TTLSeconds < 3600 {
		t.Fatalf("run's sandboxes %+v; want one with idle timeout 60 s and a TTL ≥ 1 h", sbs)
	}
	id := sbs[0].ID
	d.Track(id)
	cmd.Process.Kill()
	cmd.Wait()
	testenv.WaitFor(t, 3*time.Minute, "the killed run's sandbox "+id+" to be reaped", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		st, _, _, err := d.roundTrip(ctx, "GET", "/v1/sandboxes/"+id, nil, "")
		return err == nil && st == http.StatusNotFound
	})
	d.assertGone(id)
	es := d.auditEndsWith(id, "reap")
	if es[len(es)-1].Args["reason"] != "idle timeout reached" {
		t.Errorf("audit of the killed run's sandbox: %+v; want it to end with a reap, reason idle timeout reached", es)
	}
}

// TestDaemonSIGTERM: SIGTERM lets a running exec finish, exits 0 and
// leaves the sandbox running; the next daemon adopts it.
func TestDaemonSIGTERM(t *testing.T) {
	d := startDaemon(t)
	sb := d.create(createBody(t, `"name":"survivor","memory_mib":256`))

	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	s, err := d.startExec(ctx, sb.ID, `{"cmd":["sh","-c","sleep 3; echo done"]}`)
	if err != nil || s.res.status != http.StatusOK {
		t.Fatalf("exec: %v %+v", err, s)
	}
	if ev, err := s.next(); err != nil || ev.Type != "started" {
		t.Fatalf("first event %+v, %v; want started", ev, err)
	}
	exited := make(chan int, 1)
	go func() { exited <- d.Terminate() }()
	for {
		_, err := s.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("exec stream during shutdown: %v", err)
		}
	}
	if s.res.exit == nil || s.res.exit.ExitCode != 0 || string(s.res.stdout) != "done\n" || len(s.res.stderr) != 0 {
		t.Fatalf("exec across SIGTERM: exit %+v, error %+v, stdout %q; want done and 0", s.res.exit, s.res.err, s.res.stdout)
	}
	if code := <-exited; code != 0 {
		t.Fatalf("agentbox serve exited with %d after SIGTERM, want 0", code)
	}
	out, err := exec.Command("virsh", "-c", testenv.URI(), "domstate", sb.Domain).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "running" {
		t.Fatalf("domain %s after the daemon's SIGTERM: %q %v; want it left running", sb.Domain, out, err)
	}
	if left, _ := os.ReadDir(d.SockDir); len(left) != 0 {
		t.Errorf("the API socket is left after SIGTERM")
	}

	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if got := d.get("survivor"); got.ID != sb.ID || got.State != "running" || got.ExecCount != 1 {
		t.Fatalf("after restart: %+v; want running with exec_count 1", got)
	}
	d.expectExec(sb.ID, `{"cmd":["echo","still here"]}`, 0, "still here\n", "")
	d.call("DELETE", "/v1/sandboxes/survivor?force=true", nil, http.StatusNoContent)
	d.assertGone(sb.ID)
}
