package mcp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/mcp"
)

// harness is an MCP server over the API server's fake backend, reached
// through client.NewHandler (the path of `serve --mcp`), and a client
// session of the Go SDK over an in-memory transport.
type harness struct {
	b       *backendtest.Fake
	srv     *mcp.Server
	cs      *sdk.ClientSession
	served  chan error
	cancel  context.CancelFunc
	progMu  sync.Mutex
	progMsg []string
}

func newHarness(t *testing.T, b *backendtest.Fake, cfg mcp.Config) *harness {
	t.Helper()
	as, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client = client.NewHandler(as.Handler())
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = 20 * time.Millisecond
	}
	srv, err := mcp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{b: b, srv: srv, served: make(chan error, 1)}
	st, ct := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.served <- srv.Serve(ctx, st) }()
	cl := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			h.progMu.Lock()
			h.progMsg = append(h.progMsg, req.Params.Message)
			h.progMu.Unlock()
		},
	})
	h.cs, err = cl.Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.cs.Close()
		cancel()
		<-h.served
	})
	return h
}

// call calls tool with args and decodes its structured answer into out
// (unless nil); it fails the test on a tool error.
func (h *harness) call(t *testing.T, tool string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	res, err := h.cs.CallTool(t.Context(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error %s", tool, text(res))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v in %s", tool, err, b)
		}
	}
	return res
}

// callErr calls tool and returns its tool error's text (failing the test
// if it succeeded).
func (h *harness) callErr(t *testing.T, tool string, args map[string]any) string {
	t.Helper()
	res, err := h.cs.CallTool(t.Context(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if !res.IsError {
		t.Fatalf("%s succeeded, want a tool error: %s", tool, text(res))
	}
	return text(res)
}

func text(res *sdk.CallToolResult) string {
	var sb strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String()
}

func TestListTools(t *testing.T) {
	h := newHarness(t, &backendtest.Fake{}, mcp.Config{})
	res, err := h.cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
		b, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		}
		json.Unmarshal(b, &schema)
		for p, ps := range schema.Properties {
			if ps.Description == "" {
				t.Errorf("tool %s: argument %s has no description", tool.Name, p)
			}
		}
	}
	slices.Sort(names)
	want := []string{"create_sandbox", "delete_snapshot", "destroy_sandbox", "kill_process", "list_directory", "list_sandboxes",
		"list_snapshots", "read_file", "read_process_output", "restore", "run_command", "snapshot", "start_process", "write_file"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	tmpl, err := h.cs.ListResourceTemplates(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, rt := range tmpl.ResourceTemplates {
		uris = append(uris, rt.URITemplate)
	}
	slices.Sort(uris)
	if want := []string{mcp.AuditURITemplate, mcp.ConsoleURITemplate}; !slices.Equal(uris, want) {
		t.Fatalf("resource templates %v, want %v", uris, want)
	}
}

// TestCreateAndCleanup: create_sandbox sends the request with the
// session's label; with Cleanup the session's sandboxes are removed when
// it ends.
func TestCreateAndCleanup(t *testing.T) {
	var (
		mu      sync.Mutex
		created api.CreateSandboxRequest
		deleted []string
	)
	b := &backendtest.Fake{
		CreateSandboxFn: func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
			mu.Lock()
			created = req
			mu.Unlock()
			sb := backendtest.Sandbox("aaaaaaaaaaaa")
			sb.Name, sb.Labels = req.Name, req.Labels
			return sb, nil
		},
		ListSandboxesFn: func(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
			mu.Lock()
			defer mu.Unlock()
			if labels[mcp.SessionLabel] == "" || labels[mcp.SessionLabel] != created.Labels[mcp.SessionLabel] {
				return nil, nil
			}
			sb := backendtest.Sandbox("aaaaaaaaaaaa")
			sb.Labels = created.Labels
			return []api.Sandbox{sb}, nil
		},
		DeleteSandboxFn: func(ctx context.Context, ref string, force bool) error {
			mu.Lock()
			deleted = append(deleted, fmt.Sprintf("%s force=%v", ref, force))
			mu.Unlock()
			return nil
		},
	}
	h := newHarness(t, b, mcp.Config{Cleanup: true, DefaultImage: "/images/default"})
	var sb mcp.SandboxInfo
	h.call(t, "create_sandbox", map[string]any{"name": "w1", "cpus": 2, "memory_mib": 1024, "network": "allowlist",
		"allow": []string{"example.com"}, "ttl_seconds": 600, "labels": map[string]string{"team": "a"}}, &sb)
	if sb.ID != "aaaaaaaaaaaa" || sb.Name != "w1" || sb.State != "running" {
		t.Fatalf("answer %+v", sb)
	}
	mu.Lock()
	session := created.Labels[mcp.SessionLabel]
	if created.Image != "/images/default" || created.VCPUs != 2 || created.MemoryMiB != 1024 || created.Limits.TTLSeconds != 600 ||
		created.Network == nil || created.Network.Mode != "allowlist" || !slices.Equal(created.Network.Allow, []string{"example.com"}) ||
		created.Labels["team"] != "a" || len(session) != 16 {
		t.Fatalf("create request %+v (network %+v)", created, created.Network)
	}
	mu.Unlock()

	var list mcp.SandboxesOutput
	h.call(t, "list_sandboxes", nil, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].Labels[mcp.SessionLabel] != session {
		t.Fatalf("list_sandboxes %+v", list)
	}

	// Both image and template: refused with the API's code, nothing made.
	if msg := h.callErr(t, "create_sandbox", map[string]any{"image": "/i", "template": "python"}); msg != "invalid_argument: give template or image, not both" {
		t.Fatalf("error %q", msg)
	}
	if msg := h.callErr(t, "create_sandbox", map[string]any{"template": "python"}); !strings.HasPrefix(msg, "invalid_argument: this server resolves no templates") {
		t.Fatalf("error %q", msg)
	}

	h.cs.Close()
	h.cancel()
	if err := <-h.served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	h.served <- nil // for the cleanup
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(deleted, []string{"aaaaaaaaaaaa force=true"}) {
		t.Fatalf("deleted at the session's end: %v", deleted)
	}
}

// TestRunCommand: the exit code, both streams, the cut of a large output
// (exact counts and the note), progress notifications, sh -c.
func TestRunCommand(t *testing.T) {
	big := make([]byte, 200<<10)
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	var got api.ExecRequest
	b := &backendtest.Fake{
		ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
			if ref != "w1" {
				return api.ExitStatus{}, api.Errorf(http.StatusNotFound, api.CodeNotFound, "no sandbox %q", ref)
			}
			got = req
			started("e1", 10)
			stderr.Write([]byte("warn\n"))
			for off := 0; off < len(big); off += 32 << 10 {
				stdout.Write(big[off:min(off+32<<10, len(big))])
				if req.TimeoutMs == 1500 {
					time.Sleep(30 * time.Millisecond)
				}
			}
			return api.ExitStatus{ExitCode: 3, DurationMs: 42}, nil
		},
	}
	h := newHarness(t, b, mcp.Config{})
	var out mcp.RunCommandOutput
	params := &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{
		"sandbox": "w1", "command": "gen | tee x", "cwd": "/tmp", "env": map[string]string{"B": "2", "A": "1"}, "timeout_seconds": 1.5}}
	params.SetProgressToken("p1")
	res, err := h.cs.CallTool(t.Context(), params)
	if err != nil || res.IsError {
		t.Fatalf("run_command: %v %s", err, text(res))
	}
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &out)
	if !slices.Equal(got.Cmd, []string{"/bin/sh", "-c", "gen | tee x"}) || got.Cwd != "/tmp" || !slices.Equal(got.Env, []string{"A=1", "B=2"}) || got.TimeoutMs != 1500 {
		t.Fatalf("exec request %+v", got)
	}
	if out.ExitCode != 3 || out.Stderr != "warn\n" || out.StderrBytes != 5 || out.StderrCutBytes != 0 || out.DurationMs != 42 {
		t.Fatalf("answer %+v", out)
	}
	const half = mcp.DefaultOutputLimit / 2
	wantCut := int64(len(big) - mcp.DefaultOutputLimit)
	note := fmt.Sprintf("\n[agentbox: %d bytes cut from the middle of stdout, which was %d bytes: the first %d and the last %d are shown]\n", wantCut, len(big), half, half)
	if out.StdoutBytes != int64(len(big)) || out.StdoutCutBytes != wantCut || out.Stdout != string(big[:half])+note+string(big[len(big)-half:]) {
		t.Fatalf("stdout: %d bytes, cut %d; note present %v", out.StdoutBytes, out.StdoutCutBytes, strings.Contains(out.Stdout, note))
	}
	h.progMu.Lock()
	n := len(h.progMsg)
	h.progMu.Unlock()
	if n == 0 {
		t.Fatal("no progress notification while the command ran")
	}

	// argv runs without a shell; the API's errors keep their codes.
	h.call(t, "run_command", map[string]any{"sandbox": "w1", "argv": []string{"echo", "a b"}}, nil)
	if !slices.Equal(got.Cmd, []string{"echo", "a b"}) {
		t.Fatalf("argv %q", got.Cmd)
	}
	if msg := h.callErr(t, "run_command", map[string]any{"sandbox": "nope", "command": "true"}); msg != `not_found: no sandbox "nope"` {
		t.Fatalf("error %q", msg)
	}
	if msg := h.callErr(t, "run_command", map[string]any{"sandbox": "w1"}); !strings.HasPrefix(msg, "invalid_argument: give command") {
		t.Fatalf("error %q", msg)
	}
	if msg := h.callErr(t, "run_command", map[string]any{"sandbox": "w1", "command": "x", "argv": []string{"y"}}); !strings.HasPrefix(msg, "invalid_argument: give command (a shell command line) or argv") {
		t.Fatalf("error %q", msg)
	}
}

// TestFiles: write_file and read_file round-trip binary content through
// base64; text stays text; list_directory; a file over the limit.
func TestFiles(t *testing.T) {
	var mu sync.Mutex
	files := map[string][]byte{}
	modes := map[string]fs.FileMode{}
	info := func(p string) api.FileInfo {
		return api.FileInfo{Name: p[strings.LastIndex(p, "/")+1:], Path: p, Type: "file", Size: int64(len(files[p])), Mode: api.FormatMode(modes[p]), ModTime: backendtest.Epoch}
	}
	b := &backendtest.Fake{
		UploadFn: func(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
			p, perm := req.Path, req.Mode
			data, err := io.ReadAll(r)
			mu.Lock()
			defer mu.Unlock()
			if perm == 0 {
				perm = 0o644
			}
			files[p], modes[p] = data, perm
			return info(p), err
		},
		StatFn: func(ctx context.Context, ref, p string) (api.FileInfo, error) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := files[p]; !ok {
				return api.FileInfo{}, api.Errorf(http.StatusNotFound, api.CodeNotFound, "%s: no such file", p)
			}
			return info(p), nil
		},
		DownloadFn: func(ctx context.Context, ref, p string, open func(api.FileInfo) io.Writer) error {
			mu.Lock()
			data, fi := files[p], info(p)
			mu.Unlock()
			_, err := open(fi).Write(data)
			return err
		},
		ListFn: func(ctx context.Context, ref, p string, depth int) ([]api.FileInfo, error) {
			mu.Lock()
			defer mu.Unlock()
			var out []api.FileInfo
			for name := range files {
				out = append(out, info(name))
			}
			slices.SortFunc(out, func(a, b api.FileInfo) int { return strings.Compare(a.Name, b.Name) })
			return out, nil
		},
	}
	h := newHarness(t, b, mcp.Config{FileLimit: 1 << 20})
	bin := make([]byte, 256*3)
	for i := range bin {
		bin[i] = byte(i)
	}
	var fi mcp.FileInfo
	h.call(t, "write_file", map[string]any{"sandbox": "w1", "path": "/work/b.bin", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64", "mode": "0755"}, &fi)
	if fi.Size != int64(len(bin)) || fi.Mode != "0755" || !bytes.Equal(files["/work/b.bin"], bin) {
		t.Fatalf("write_file: %+v", fi)
	}
	var fc mcp.FileContent
	h.call(t, "read_file", map[string]any{"sandbox": "w1", "path": "/work/b.bin"}, &fc)
	back, err := base64.StdEncoding.DecodeString(fc.Content)
	if err != nil || fc.Encoding != "base64" || !bytes.Equal(back, bin) || fc.Size != int64(len(bin)) {
		t.Fatalf("read_file: %+v (%v)", fc, err)
	}
	h.call(t, "write_file", map[string]any{"sandbox": "w1", "path": "/work/t.txt", "content": "héllo\n"}, nil)
	h.call(t, "read_file", map[string]any{"sandbox": "w1", "path": "/work/t.txt"}, &fc)
	if fc.Encoding != "text" || fc.Content != "héllo\n" {
		t.Fatalf("read_file text: %+v", fc)
	}
	if msg := h.callErr(t, "read_file", map[string]any{"sandbox": "w1", "path": "/work/b.bin", "encoding": "text"}); !strings.HasPrefix(msg, "invalid_argument: file \"/work/b.bin\" is not valid UTF-8 text") {
		t.Fatalf("error %q", msg)
	}
	if msg := h.callErr(t, "read_file", map[string]any{"sandbox": "w1", "path": "/nope"}); msg != "not_found: /nope: no such file" {
		t.Fatalf("error %q", msg)
	}
	var ld mcp.ListDirectoryOutput
	h.call(t, "list_directory", map[string]any{"sandbox": "w1", "path": "/work"}, &ld)
	if len(ld.Entries) != 2 || ld.Entries[0].Name != "b.bin" || ld.Entries[0].Size != 768 || ld.Entries[1].Name != "t.txt" {
		t.Fatalf("list_directory: %+v", ld)
	}
	files["/big"] = make([]byte, 1<<20+1)
	if msg := h.callErr(t, "read_file", map[string]any{"sandbox": "w1", "path": "/big"}); !strings.HasPrefix(msg, "payload_too_large: file /big is 1048577 bytes, more than this server's limit of 1048576") {
		t.Fatalf("error %q", msg)
	}
	if msg := h.callErr(t, "write_file", map[string]any{"sandbox": "w1", "path": "/x", "content": "!!", "encoding": "base64"}); !strings.HasPrefix(msg, "invalid_argument: content is not base64") {
		t.Fatalf("error %q", msg)
	}
}

// TestProcessOutput: read_process_output pages through the output with
// exact offsets, bounded per call.
func TestProcessOutput(t *testing.T) {
	var out bytes.Buffer
	for i := range 3000 {
		fmt.Fprintf(&out, "line %04d\n", i) // 10 bytes a line: 30000 bytes
	}
	all := out.Bytes()
	var reads atomic.Int32
	b := &backendtest.Fake{
		StartProcessFn: func(ctx context.Context, ref string, req api.ExecRequest) (api.Process, error) {
			p := backendtest.Process("p1")
			p.Cmd = req.Cmd
			return p, nil
		},
		ProcessOutputFn: func(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
			reads.Add(1)
			for off := offset; off < int64(len(all)); off += 1000 {
				if err := emit(api.ExecEvent{Type: api.EventStdout, Data: all[off:min(off+1000, int64(len(all)))]}); err != nil {
					return err
				}
			}
			return emit(api.ExecEvent{Type: api.EventExit, Exit: &api.ExitStatus{ExitCode: 0}})
		},
		GetProcessFn: func(ctx context.Context, ref, pid string) (api.Process, error) {
			p := backendtest.Process(pid)
			p.State, p.Exit, p.OutputBytes = api.ProcessExited, &api.ExitStatus{ExitCode: 0}, int64(len(all))
			return p, nil
		},
	}
	h := newHarness(t, b, mcp.Config{OutputLimit: 4096})
	var pi mcp.ProcessInfo
	h.call(t, "start_process", map[string]any{"sandbox": "w1", "command": "seq"}, &pi)
	if pi.Process != "p1" {
		t.Fatalf("start_process: %+v", pi)
	}
	var got []byte
	var offset int64
	for range 10 {
		var r mcp.ReadProcessOutputOutput
		h.call(t, "read_process_output", map[string]any{"sandbox": "w1", "process": "p1", "offset": offset}, &r)
		if len(r.Stdout) > 8192 || r.NextOffset != offset+int64(len(r.Stdout)) {
			t.Fatalf("read at %d: %d bytes, next %d", offset, len(r.Stdout), r.NextOffset)
		}
		got = append(got, r.Stdout...)
		offset = r.NextOffset
		if !r.More {
			if r.State != api.ProcessExited || r.ExitCode == nil || *r.ExitCode != 0 {
				t.Fatalf("end: %+v", r)
			}
			break
		}
	}
	if !bytes.Equal(got, all) {
		t.Fatalf("read %d bytes, want %d exact", len(got), len(all))
	}
}

// TestKillProcess: kill_process sends the signal asked for (KILL by
// default); a process a signal ended says which (signal), beside exit
// code 128+N.
func TestKillProcess(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	b := &backendtest.Fake{
		KillProcessFn: func(ctx context.Context, ref, pid, signal string) error {
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, ref+" "+pid+" "+signal)
			return nil
		},
		ProcessOutputFn: func(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
			return emit(api.ExecEvent{Type: api.EventExit, Exit: &api.ExitStatus{ExitCode: 137, Signal: 9}})
		},
		GetProcessFn: func(ctx context.Context, ref, pid string) (api.Process, error) {
			p := backendtest.Process(pid)
			p.State, p.Exit = api.ProcessExited, &api.ExitStatus{ExitCode: 137, Signal: 9}
			return p, nil
		},
	}
	h := newHarness(t, b, mcp.Config{})
	var k mcp.KillOutput
	h.call(t, "kill_process", map[string]any{"sandbox": "w1", "process": "p1"}, &k)
	h.call(t, "kill_process", map[string]any{"sandbox": "w1", "process": "p1", "signal": "TERM"}, nil)
	if k.Signalled != "p1" || !slices.Equal(sent, []string{"w1 p1 ", "w1 p1 TERM"}) {
		t.Fatalf("kill_process: %+v, sent %q", k, sent)
	}
	var r mcp.ReadProcessOutputOutput
	h.call(t, "read_process_output", map[string]any{"sandbox": "w1", "process": "p1"}, &r)
	if r.State != api.ProcessExited || r.ExitCode == nil || *r.ExitCode != 137 || r.Signal != 9 {
		t.Fatalf("read_process_output of a killed process: %+v", r)
	}
}
