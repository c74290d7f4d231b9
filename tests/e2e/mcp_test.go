package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// The MCP tests drive `agentbox mcp` (stdio) and `agentbox serve --mcp`
// (streamable HTTP) with the real MCP Inspector in CLI mode and with a
// client on the TypeScript MCP SDK (tests/mcp/client.mjs), both
// installed in tests/mcp/node_modules by `make deps` (npm ci).

// mcpTools are the tools the server lists, sorted.
var mcpTools = []string{"create_sandbox", "delete_snapshot", "destroy_sandbox", "kill_process", "list_directory", "list_sandboxes",
	"list_snapshots", "read_file", "read_process_output", "restore", "run_command", "snapshot", "start_process", "write_file"}

// mcpDir returns tests/mcp with its npm packages installed, or skips (a
// failure under AGENTBOX_TEST_STRICT) saying how to install them.
func mcpDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "mcp"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		testenv.SkipOrFail(t, "node not found: the MCP tests run the MCP Inspector and a TypeScript SDK client on Node.js (the npm package nodejs)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector", "cli", "build", "cli.js")); err != nil {
		testenv.SkipOrFail(t, "the MCP Inspector is not installed in tests/mcp: run `make deps` (npm ci in tests/mcp)")
	}
	return dir
}

// toolResult is what the Inspector prints for tools/call.
type toolResult struct {
	IsError bool `json:"isError"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
}

// inspector runs the MCP Inspector in CLI mode with target (a command
// line, or a URL and transport flags) and the method arguments; it
// returns stdout, stderr and the exit error.
func inspector(t *testing.T, dir string, env []string, target []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command("node", append(append([]string{filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector", "cli", "build", "cli.js"), "--cli"}, target...), args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return stdout.String(), stderr.String(), err
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("inspector %q hung; stderr:\n%s", args, stderr.String())
	}
	return "", "", nil
}

// mcpSession calls the Inspector for one target.
type mcpSession struct {
	t      *testing.T
	dir    string
	env    []string
	target []string
}

// tools lists the tools' names, sorted.
func (s mcpSession) tools() []string {
	s.t.Helper()
	out, errOut, err := inspector(s.t, s.dir, s.env, s.target, "--method", "tools/list")
	if err != nil {
		s.t.Fatalf("tools/list: %v\n%s%s", err, out, errOut)
	}
	var res struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		s.t.Fatalf("tools/list: %v in %q", err, out)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// call calls tool with key=value arguments (the Inspector parses values
// as JSON where they are JSON) and returns its result.
func (s mcpSession) call(tool string, kv ...string) toolResult {
	s.t.Helper()
	args := []string{"--method", "tools/call", "--tool-name", tool}
	for _, a := range kv {
		args = append(args, "--tool-arg", a)
	}
	out, errOut, err := inspector(s.t, s.dir, s.env, s.target, args...)
	if err != nil {
		s.t.Fatalf("tools/call %s: %v\n%s%s", tool, err, out, errOut)
	}
	var res toolResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		s.t.Fatalf("tools/call %s: %v in %q", tool, err, out)
	}
	return res
}

// ok calls tool, fails on a tool error, and decodes its structured
// content into out.
func (s mcpSession) ok(out any, tool string, kv ...string) {
	s.t.Helper()
	res := s.call(tool, kv...)
	if res.IsError {
		s.t.Fatalf("%s: tool error %+v", tool, res.Content)
	}
	if err := json.Unmarshal(res.StructuredContent, out); err != nil {
		s.t.Fatalf("%s: %v in %s", tool, err, res.StructuredContent)
	}
}

// mcpRun is run_command's answer.
type mcpRun struct {
	ExitCode       int    `json:"exit_code"`
	Error          string `json:"error"`
	Stdout         string `json:"stdout"`
	Stderr         string `json:"stderr"`
	StdoutBytes    int64  `json:"stdout_bytes"`
	StderrBytes    int64  `json:"stderr_bytes"`
	StdoutCutBytes int64  `json:"stdout_cut_bytes"`
}

// exerciseMCP runs the tools every transport must serve on one new
// sandbox: create_sandbox, run_command (exact exit code and output; 5 MiB
// cut with the note), write_file/read_file of binary content,
// list_directory, a missing sandbox's not_found, then more (if not
// nil) with the sandbox's name, and destroy_sandbox. It returns the
// sandbox's ID.
func exerciseMCP(t *testing.T, d *daemon, s mcpSession, name string, more func(name string), createArgs ...string) string {
	var sb struct {
		ID     string            `json:"id"`
		Name   string            `json:"name"`
		State  string            `json:"state"`
		Labels map[string]string `json:"labels"`
	}
	s.ok(&sb, "create_sandbox", append([]string{"name=" + name}, createArgs...)...)
	d.Track(sb.ID)
	if sb.Name != name || sb.State != "running" || len(sb.Labels["agentbox.mcp-session"]) == 0 {
		t.Fatalf("create_sandbox: %+v", sb)
	}

	var r mcpRun
	s.ok(&r, "run_command", "sandbox="+name, `command=printf 'out\n'; printf 'err 1\n' >&2; exit 7`)
	if r.ExitCode != 7 || r.Stdout != "out\n" || r.Stderr != "err 1\n" || r.StdoutBytes != 4 || r.StderrBytes != 6 || r.StdoutCutBytes != 0 {
		t.Fatalf("run_command: %+v", r)
	}
	s.ok(&r, "run_command", "sandbox="+sb.ID, `argv=["printf","%s|","a b","c"]`)
	if r.ExitCode != 0 || r.Stdout != "a b|c|" || r.Stderr != "" {
		t.Fatalf("run_command argv: %+v", r)
	}
	// 5 MiB of output: the middle is cut, the answer says how much.
	const size, limit = 5 << 20, 64 << 10
	s.ok(&r, "run_command", "sandbox="+name, `command=head -c 5242880 /dev/zero | tr '\0' x`)
	note := fmt.Sprintf("\n[agentbox: %d bytes cut from the middle of stdout, which was %d bytes: the first %d and the last %d are shown]\n", size-limit, size, limit/2, limit/2)
	want := strings.Repeat("x", limit/2) + note + strings.Repeat("x", limit/2)
	if r.ExitCode != 0 || r.StdoutBytes != size || r.StdoutCutBytes != size-limit || r.Stdout != want {
		t.Fatalf("run_command of 5 MiB: exit %d, %d bytes, %d cut, %d returned; note present %v", r.ExitCode, r.StdoutBytes, r.StdoutCutBytes, len(r.Stdout), strings.Contains(r.Stdout, note))
	}

	// A binary file, every byte value, round-trips through base64.
	bin := make([]byte, 4096)
	for i := range bin {
		bin[i] = byte(i*7 + i>>8)
	}
	var fi struct {
		Size int64  `json:"size"`
		Mode string `json:"mode"`
	}
	s.ok(&fi, "write_file", "sandbox="+name, "path=/tmp/mcp/b.bin", "content="+base64.StdEncoding.EncodeToString(bin), "encoding=base64", "parents=true", "mode=0600")
	if fi.Size != int64(len(bin)) || fi.Mode != "0600" {
		t.Fatalf("write_file: %+v", fi)
	}
	var fc struct {
		Encoding string `json:"encoding"`
		Content  string `json:"content"`
		Size     int64  `json:"size"`
	}
	s.ok(&fc, "read_file", "sandbox="+name, "path=/tmp/mcp/b.bin")
	back, err := base64.StdEncoding.DecodeString(fc.Content)
	if err != nil || fc.Encoding != "base64" || !bytes.Equal(back, bin) {
		t.Fatalf("read_file: encoding %s, %d bytes back (%v), equal %v", fc.Encoding, len(back), err, bytes.Equal(back, bin))
	}
	// The bytes in the guest are the same (sha256 there).
	s.ok(&r, "run_command", "sandbox="+name, "command=sha256sum /tmp/mcp/b.bin")
	if r.Stdout != sha(bin)+"  /tmp/mcp/b.bin\n" {
		t.Fatalf("sha256sum in the guest: %q, want %s", r.Stdout, sha(bin))
	}
	s.ok(&fi, "write_file", "sandbox="+name, "path=/tmp/mcp/t.txt", "content=héllo wörld")
	s.ok(&fc, "read_file", "sandbox="+name, "path=/tmp/mcp/t.txt")
	if fc.Encoding != "text" || fc.Content != "héllo wörld" {
		t.Fatalf("read_file text: %+v", fc)
	}
	var ld struct {
		Entries []struct {
			Name string `json:"name"`
			Type string `json:"type"`
			Size int64  `json:"size"`
		} `json:"entries"`
	}
	s.ok(&ld, "list_directory", "sandbox="+name, "path=/tmp/mcp")
	var entries []string
	for _, e := range ld.Entries {
		entries = append(entries, fmt.Sprintf("%s %s %d", e.Name, e.Type, e.Size))
	}
	if !slices.Equal(entries, []string{"b.bin file 4096", "t.txt file 13"}) {
		t.Fatalf("list_directory: %q", entries)
	}

	// Errors are tool errors with the API's codes.
	res := s.call("run_command", "sandbox=no-such-box", "command=exit 0")
	if !res.IsError || len(res.Content) != 1 || !strings.HasPrefix(res.Content[0].Text, "not_found: ") {
		t.Fatalf("run_command in a missing sandbox: %+v", res)
	}
	// A write into a missing directory says which and what to do, in the
	// tools' words (no temporary file, no CLI flag).
	res = s.call("write_file", "sandbox="+name, "path=/tmp/nodir/x.txt", "content=x")
	if want := "not_found: write /tmp/nodir/x.txt: directory /tmp/nodir does not exist: create it first, or pass parents: true"; !res.IsError || len(res.Content) != 1 || res.Content[0].Text != want {
		t.Fatalf("write_file into a missing directory: %+v, want %q", res, want)
	}

	if more != nil {
		more(name)
	}

	var del struct {
		Destroyed string `json:"destroyed"`
	}
	s.ok(&del, "destroy_sandbox", "sandbox="+name)
	if del.Destroyed != name {
		t.Fatalf("destroy_sandbox: %+v", del)
	}
	if got := d.list(""); len(got) != 0 {
		t.Fatalf("sandboxes after destroy_sandbox: %v", ids(got))
	}
	return sb.ID
}

// snapshotAndProcessesMCP runs the snapshot, restore and process tools
// on sandbox name (which holds /tmp/mcp/t.txt, exerciseMCP's text file):
// snapshot it, restore the snapshot under a new name and read the file
// written before the snapshot there (and not one written after it);
// start a process there, read its output with offsets (from 0, from
// next_offset, again from the middle), kill it; destroy the restored
// sandbox and remove the snapshot. Each Inspector call is a session of
// its own, so this needs a server without --mcp-cleanup (stdio).
func snapshotAndProcessesMCP(t *testing.T, d *daemon, s mcpSession, name string) {
	var snap struct {
		ID, Name, Sandbox string
	}
	s.ok(&snap, "snapshot", "sandbox="+name, "name=mcp-snap")
	src := d.get(name)
	if snap.Name != "mcp-snap" || snap.Sandbox != src.ID || snap.ID == "" {
		t.Fatalf("snapshot: %+v, want mcp-snap of %s", snap, src.ID)
	}
	var fi struct {
		Size int64 `json:"size"`
	}
	s.ok(&fi, "write_file", "sandbox="+name, "path=/tmp/mcp/after.txt", "content=after")

	var restored struct {
		Sandboxes []struct {
			ID     string            `json:"id"`
			Name   string            `json:"name"`
			State  string            `json:"state"`
			Labels map[string]string `json:"labels"`
		} `json:"sandboxes"`
	}
	s.ok(&restored, "restore", "snapshot=mcp-snap", "name=mcp-restored")
	if len(restored.Sandboxes) == 1 {
		d.Track(restored.Sandboxes[0].ID)
	}
	if len(restored.Sandboxes) != 1 || restored.Sandboxes[0].Name != "mcp-restored" || restored.Sandboxes[0].State != "running" ||
		restored.Sandboxes[0].ID == src.ID || len(restored.Sandboxes[0].Labels["agentbox.mcp-session"]) == 0 {
		t.Fatalf("restore: %+v", restored)
	}
	var fc struct {
		Encoding string `json:"encoding"`
		Content  string `json:"content"`
	}
	s.ok(&fc, "read_file", "sandbox=mcp-restored", "path=/tmp/mcp/t.txt")
	if fc.Encoding != "text" || fc.Content != "héllo wörld" {
		t.Fatalf("read_file of the restored sandbox: %+v", fc)
	}
	if res := s.call("read_file", "sandbox=mcp-restored", "path=/tmp/mcp/after.txt"); !res.IsError || len(res.Content) != 1 || !strings.HasPrefix(res.Content[0].Text, "not_found: ") {
		t.Fatalf("read_file of a file written after the snapshot, in the restored sandbox: %+v", res)
	}

	// A process: "one\ntwo\n" at once, then (once /tmp/go exists) "err\n"
	// on stderr and "three\n" and /tmp/done, then it sleeps until killed.
	type procInfo struct {
		Process  string `json:"process"`
		Pid      int    `json:"pid"`
		State    string `json:"state"`
		ExitCode *int   `json:"exit_code"`
		Signal   int    `json:"signal"`
	}
	var p procInfo
	s.ok(&p, "start_process", "sandbox=mcp-restored",
		`command=printf 'one\ntwo\n'; while [ ! -e /tmp/go ]; do sleep 0.1; done; printf 'err\n' >&2; printf 'three\n'; touch /tmp/done; exec sleep 600`)
	if p.Process == "" || p.Pid <= 0 || p.State != "running" || p.ExitCode != nil {
		t.Fatalf("start_process: %+v", p)
	}
	type procOutput struct {
		Stdout     string `json:"stdout"`
		Stderr     string `json:"stderr"`
		NextOffset int64  `json:"next_offset"`
		More       bool   `json:"more"`
		procInfo
	}
	var out procOutput
	read := func(offset int64, wait string) {
		t.Helper()
		out = procOutput{}
		s.ok(&out, "read_process_output", "sandbox=mcp-restored", "process="+p.Process, fmt.Sprintf("offset=%d", offset), "wait_seconds="+wait)
	}
	read(0, "30")
	if out.Stdout != "one\ntwo\n" || out.Stderr != "" || out.NextOffset != 8 || out.More || out.State != "running" || out.Process != p.Process {
		t.Fatalf("read_process_output from 0: %+v", out)
	}
	// A command that cannot start says why.
	var r mcpRun
	s.ok(&r, "run_command", "sandbox=mcp-restored", `argv=["no-such-cmd"]`)
	if r.ExitCode != 127 || r.Error != "no-such-cmd: command not found" || r.Stderr != "" {
		t.Fatalf("run_command of a missing command: %+v", r)
	}
	var bad struct {
		procInfo
		Error string `json:"error"`
	}
	s.ok(&bad, "start_process", "sandbox=mcp-restored", `argv=["no-such-cmd"]`)
	if bad.ExitCode == nil || *bad.ExitCode != 127 || bad.Error != "no-such-cmd: command not found" {
		t.Fatalf("start_process of a missing command: %+v", bad)
	}
	s.ok(&r, "run_command", "sandbox=mcp-restored", "command=touch /tmp/go; while [ ! -e /tmp/done ]; do sleep 0.1; done")
	if r.ExitCode != 0 {
		t.Fatalf("run_command touch /tmp/go: %+v", r)
	}
	read(8, "30")
	if out.Stdout != "three\n" || out.Stderr != "err\n" || out.NextOffset != 18 || out.More || out.State != "running" {
		t.Fatalf("read_process_output from 8: %+v", out)
	}
	read(4, "0")
	if out.Stdout != "two\nthree\n" || out.Stderr != "err\n" || out.NextOffset != 18 || out.More || out.State != "running" {
		t.Fatalf("read_process_output from 4: %+v", out)
	}
	var k struct {
		Signalled string `json:"signalled"`
	}
	s.ok(&k, "kill_process", "sandbox=mcp-restored", "process="+p.Process)
	if k.Signalled != p.Process {
		t.Fatalf("kill_process: %+v", k)
	}
	// Waiting from the end answers when the process ended.
	read(18, "30")
	if out.Stdout != "" || out.Stderr != "" || out.NextOffset != 18 || out.State != "exited" || out.ExitCode == nil || *out.ExitCode != 137 || out.Signal != 9 {
		code := "none"
		if out.ExitCode != nil {
			code = fmt.Sprint(*out.ExitCode)
		}
		t.Fatalf("read_process_output after kill_process: %+v (exit code %s)", out, code)
	}

	var del struct {
		Destroyed string `json:"destroyed"`
	}
	s.ok(&del, "destroy_sandbox", "sandbox=mcp-restored")
	if del.Destroyed != "mcp-restored" {
		t.Fatalf("destroy_sandbox: %+v", del)
	}
	// list_snapshots: every Inspector call is a session of its own, so
	// this one took none; all lists the daemon's.
	var snaps struct {
		Snapshots []struct {
			ID, Name, Sandbox string
		} `json:"snapshots"`
	}
	s.ok(&snaps, "list_snapshots")
	if len(snaps.Snapshots) != 0 {
		t.Fatalf("list_snapshots of a new session: %+v", snaps)
	}
	s.ok(&snaps, "list_snapshots", "all=true")
	if len(snaps.Snapshots) != 1 || snaps.Snapshots[0].ID != snap.ID || snaps.Snapshots[0].Name != "mcp-snap" || snaps.Snapshots[0].Sandbox != src.ID {
		t.Fatalf("list_snapshots all: %+v, want mcp-snap (%s)", snaps, snap.ID)
	}
	var ds struct {
		Deleted string `json:"deleted"`
	}
	s.ok(&ds, "delete_snapshot", "snapshot=mcp-snap")
	if ds.Deleted != snap.ID {
		t.Fatalf("delete_snapshot: %+v", ds)
	}
	if list := d.snapshots(""); len(list) != 0 {
		t.Fatalf("snapshots left: %+v", list)
	}

	// With --mcp-cleanup the snapshot a session took goes when the session
	// (this one Inspector call) ends.
	cleaning := s
	cleaning.target = append(slices.Clone(s.target), "--mcp-cleanup")
	cleaning.ok(&snap, "snapshot", "sandbox="+name, "name=mcp-snap-gone")
	if snap.Name != "mcp-snap-gone" {
		t.Fatalf("snapshot: %+v", snap)
	}
	testenv.WaitFor(t, time.Minute, "the session's snapshot removed by --mcp-cleanup", func() bool { return len(d.snapshots("")) == 0 })
}

// TestMCPStdio: the MCP Inspector drives `agentbox mcp` over stdio
// against a real daemon and a TCG guest; each call is one session (one
// `agentbox mcp` process), and without --mcp-cleanup a sandbox outlives
// the session that made it.
func TestMCPStdio(t *testing.T) {
	dir := mcpDir(t)
	d := startDaemon(t)
	s := mcpSession{t: t, dir: dir,
		env:    []string{"AGENTBOX_CONFIG=", "AGENTBOX_SOCKET=" + d.Socket, "AGENTBOX_IMAGE=" + testenv.Image(t)},
		target: []string{agentboxBin, "mcp"},
	}
	if got := s.tools(); !slices.Equal(got, mcpTools) {
		t.Fatalf("tools/list: %v, want %v", got, mcpTools)
	}
	id := exerciseMCP(t, d, s, "mcp-stdio", func(name string) { snapshotAndProcessesMCP(t, d, s, name) })
	// The audit names the socket's caller (uid) for the MCP session's calls.
	var execs int
	for _, e := range d.audit(id) {
		if e.Action == "exec" {
			execs++
			if !strings.HasPrefix(e.Caller, "uid:") {
				t.Errorf("audit caller %q, want uid:N", e.Caller)
			}
		}
	}
	if execs != 4 {
		t.Errorf("%d execs in the audit, want 4", execs)
	}

	// --local: the service runs inside `agentbox mcp` (no daemon), with
	// its state in a run directory that is gone when the session ends.
	state, runtime := t.TempDir(), testenv.ShortTempDir(t)
	local := mcpSession{t: t, dir: dir,
		env: []string{"AGENTBOX_CONFIG=", "AGENTBOX_SOCKET=" + filepath.Join(runtime, "none.sock"), "AGENTBOX_URI=" + testenv.URI(),
			"AGENTBOX_STATE_DIR=" + state, "AGENTBOX_RUNTIME_DIR=" + runtime, "AGENTBOX_IMAGE=" + testenv.Image(t)},
		target: []string{agentboxBin, "mcp", "--local"},
	}
	if got := local.tools(); !slices.Equal(got, mcpTools) {
		t.Fatalf("tools/list --local: %v, want %v", got, mcpTools)
	}
	res := local.call("run_command", "sandbox=no-such-box", "command=exit 0")
	if !res.IsError || len(res.Content) != 1 || !strings.HasPrefix(res.Content[0].Text, "not_found: ") {
		t.Fatalf("run_command --local in a missing sandbox: %+v", res)
	}
	testenv.AssertNoLeaks(t, state, runtime)
}

// TestMCPHTTP: `serve --mcp` serves MCP at /mcp behind the API's bearer
// token: the Inspector (streamable HTTP) is refused with a wrong or no
// token and runs the tools with the right one; then a TypeScript SDK
// client does the same in one session, with progress notifications, and
// its DELETE of the session makes --mcp-cleanup remove its sandbox.
func TestMCPHTTP(t *testing.T) {
	dir := mcpDir(t)
	image := testenv.Image(t)
	token := hex.EncodeToString(randomBytes(32))
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, "--listen-tcp", "127.0.0.1:0", "--mcp", "--mcp-cleanup")
	d.Globals = []string{"--token-file", tokenFile}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	var m []string
	testenv.WaitFor(t, 30*time.Second, "the TCP listener's address in the daemon's log", func() bool {
		m = regexp.MustCompile(`msg="API listening" network=tcp addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(d.Log.String())
		return m != nil
	})
	url := "http://" + m[1] + "/mcp"
	env := []string{"AGENTBOX_CONFIG="}
	for _, auth := range [][]string{nil, {"--header", "Authorization: Bearer " + token + "x"}} {
		target := append([]string{url, "--transport", "http"}, auth...)
		out, errOut, err := inspector(t, dir, env, target, "--method", "tools/list")
		if err == nil || !strings.Contains(out+errOut, `"code":"unauthorized"`) {
			t.Fatalf("tools/list with %q: %v; want refused with unauthorized:\n%s%s", auth, err, out, errOut)
		}
	}
	s := mcpSession{t: t, dir: dir, env: env, target: []string{url, "--transport", "http", "--header", "Authorization: Bearer " + token}}
	if got := s.tools(); !slices.Equal(got, mcpTools) {
		t.Fatalf("tools/list: %v, want %v", got, mcpTools)
	}
	id := exerciseMCP(t, d, s, "mcp-http", nil, "image="+image)
	for _, e := range d.audit(id) {
		if e.Action == "exec" && e.Caller != "token" {
			t.Errorf("audit caller %q of an exec through /mcp, want token", e.Caller)
		}
	}

	// The TypeScript SDK's client.
	cmd := exec.Command("node", filepath.Join(dir, "client.mjs"), url, token, "mcp-ts", image)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client.mjs: %v\n%s%s", err, out, stderr.String())
	}
	var ts struct {
		WrongToken string   `json:"wrongToken"`
		Tools      []string `json:"tools"`
		Sandbox    struct {
			ID, Name, State, Session string
		} `json:"sandbox"`
		SessionID string `json:"sessionId"`
		Run       mcpRun `json:"run"`
		Progress  int    `json:"progress"`
		Argv      mcpRun `json:"argv"`
		File      struct {
			Written  int64  `json:"written"`
			Encoding string `json:"encoding"`
			Equal    bool   `json:"equal"`
		} `json:"file"`
		Dir     []string `json:"dir"`
		Missing struct {
			IsError bool   `json:"isError"`
			Text    string `json:"text"`
		} `json:"missing"`
		ConsoleBytes int `json:"consoleBytes"`
	}
	if err := json.Unmarshal(out, &ts); err != nil {
		t.Fatalf("client.mjs: %v in %s", err, out)
	}
	d.Track(ts.Sandbox.ID)
	if !strings.Contains(ts.WrongToken, `"code":"unauthorized"`) {
		t.Errorf("wrong token: %q, want refused with unauthorized", ts.WrongToken)
	}
	if !slices.Equal(ts.Tools, mcpTools) {
		t.Errorf("tools: %v", ts.Tools)
	}
	if ts.Sandbox.Name != "mcp-ts" || ts.Sandbox.State != "running" || ts.Sandbox.Session != ts.SessionID || ts.SessionID == "" {
		t.Errorf("sandbox %+v, session %q: want running, labelled with the session", ts.Sandbox, ts.SessionID)
	}
	if ts.Run.ExitCode != 5 || ts.Run.Stdout != "tick 1\ntick 2\ntick 3\n" || ts.Run.Stderr != "done\n" {
		t.Errorf("run_command: %+v", ts.Run)
	}
	if ts.Progress < 1 {
		t.Errorf("%d progress notifications during a 3 s command, want some", ts.Progress)
	}
	if ts.Argv.Stdout != "a b|c|" || ts.Argv.ExitCode != 0 {
		t.Errorf("run_command argv: %+v", ts.Argv)
	}
	if ts.File.Written != 65536 || ts.File.Encoding != "base64" || !ts.File.Equal {
		t.Errorf("file round trip: %+v", ts.File)
	}
	if !slices.Equal(ts.Dir, []string{"bin.dat file 65536"}) {
		t.Errorf("list_directory: %q", ts.Dir)
	}
	if !ts.Missing.IsError || !strings.HasPrefix(ts.Missing.Text, "not_found: ") {
		t.Errorf("missing sandbox: %+v", ts.Missing)
	}
	if ts.ConsoleBytes == 0 {
		t.Errorf("the console resource is empty")
	}
	// The session ended (DELETE): --mcp-cleanup removes its sandbox.
	testenv.WaitFor(t, 2*time.Minute, "the TypeScript session's sandbox removed by --mcp-cleanup", func() bool {
		return len(d.list("")) == 0
	})
}
