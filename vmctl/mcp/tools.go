package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/vmctl/api"
)

// The descriptions of arguments shared by several tools.
const (
	descSandbox = "The sandbox's ID or name, as create_sandbox or list_sandboxes gave it."
	descCommand = "A shell command line, run with sh -c (pipes, redirections and && work). Give command or argv, not both."
	descArgv    = "The command as an argument vector, run without a shell, e.g. [\"python3\", \"-c\", \"print(1)\"]. Give command or argv, not both."
	descCwd     = "Absolute working directory in the sandbox; default /."
	descEnv     = "Environment variables added for the command, e.g. {\"LANG\": \"C.UTF-8\"}."
)

// SandboxInfo is a sandbox as the tools describe it.
type SandboxInfo struct {
	ID        string            `json:"id" jsonschema:"the sandbox's ID"`
	Name      string            `json:"name,omitempty" jsonschema:"the sandbox's name, if it has one"`
	State     string            `json:"state" jsonschema:"creating, running, paused, stopped or failed"`
	Reason    string            `json:"reason,omitempty" jsonschema:"why it failed or stopped"`
	Image     string            `json:"image" jsonschema:"its image directory on the daemon's host"`
	Accel     string            `json:"accel,omitempty" jsonschema:"kvm or tcg"`
	VCPUs     int               `json:"vcpus" jsonschema:"virtual CPUs"`
	MemoryMiB int               `json:"memory_mib" jsonschema:"guest memory in MiB"`
	Network   string            `json:"network,omitempty" jsonschema:"network policy: none, allowlist or open"`
	Labels    map[string]string `json:"labels,omitempty" jsonschema:"its labels"`
	CreatedAt string            `json:"created_at" jsonschema:"when it was created (RFC 3339)"`
	ExpiresAt string            `json:"expires_at,omitempty" jsonschema:"when its TTL removes it (RFC 3339)"`
}

// sandboxInfo converts the API's sandbox.
func sandboxInfo(sb api.Sandbox) SandboxInfo {
	si := SandboxInfo{
		ID: sb.ID, Name: sb.Name, State: sb.State, Reason: sb.Reason, Image: sb.Image.Dir,
		Accel: sb.Accel, VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB, Labels: sb.Labels,
		CreatedAt: sb.CreatedAt.UTC().Format(time.RFC3339),
	}
	if sb.Network != nil {
		si.Network = sb.Network.Mode
	}
	if sb.ExpiresAt != nil {
		si.ExpiresAt = sb.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return si
}

// CreateSandboxInput is the arguments of create_sandbox.
type CreateSandboxInput struct {
	Template           string            `json:"template,omitempty" jsonschema:"A profile name such as python, node or build: the image is built from it. Give template or image (or neither, when the server has a default image)."`
	Image              string            `json:"image,omitempty" jsonschema:"An image directory on the daemon's host (holds manifest.toml). Give template or image."`
	Name               string            `json:"name,omitempty" jsonschema:"An optional unique name to refer to the sandbox by (letters, digits, _ . -; at most 63)."`
	CPUs               int               `json:"cpus,omitempty" jsonschema:"Virtual CPUs; default: the image's."`
	MemoryMiB          int               `json:"memory_mib,omitempty" jsonschema:"Guest memory in MiB; default: the image's."`
	Network            string            `json:"network,omitempty" jsonschema:"Network policy: none (default: no network device), allowlist (only the hosts in allow), open (anything but the host and private ranges)."`
	Allow              []string          `json:"allow,omitempty" jsonschema:"For network allowlist: the destinations allowed, host names or addresses with an optional :PORT, e.g. [\"example.com\", \"api.example.com:443\"]."`
	TTLSeconds         int64             `json:"ttl_seconds,omitempty" jsonschema:"Remove the sandbox this many seconds after creation; default: the daemon's."`
	IdleTimeoutSeconds int64             `json:"idle_timeout_seconds,omitempty" jsonschema:"Remove the sandbox after this many seconds without a command or file operation; default: the daemon's."`
	Labels             map[string]string `json:"labels,omitempty" jsonschema:"Labels to find the sandbox by later (list_sandboxes)."`
}

// RunCommandInput is the arguments of run_command.
type RunCommandInput struct {
	Sandbox        string            `json:"sandbox" jsonschema:"The sandbox's ID or name, as create_sandbox or list_sandboxes gave it."`
	Command        string            `json:"command,omitempty" jsonschema:"A shell command line, run with sh -c (pipes, redirections and && work). Give command or argv, not both."`
	Argv           []string          `json:"argv,omitempty" jsonschema:"The command as an argument vector, run without a shell, e.g. [\"python3\", \"-c\", \"print(1)\"]. Give command or argv, not both."`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"Absolute working directory in the sandbox; default /."`
	Env            map[string]string `json:"env,omitempty" jsonschema:"Environment variables added for the command, e.g. {\"LANG\": \"C.UTF-8\"}."`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"Text given to the command on its standard input; default: none (/dev/null)."`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"Kill the command after this many seconds (timed_out is then true); default: the sandbox's exec timeout, if any. For commands that run longer than a few minutes use start_process."`
}

// RunCommandOutput is the answer of run_command.
type RunCommandOutput struct {
	ExitCode       int    `json:"exit_code" jsonschema:"the command's exit code, shell-style: 128+N when killed by signal N, 124 when timeout_seconds killed it, 127 when it was not found and 126 when it could not start otherwise (error says why)"`
	Signal         int    `json:"signal,omitempty" jsonschema:"the signal that killed it, if one did"`
	TimedOut       bool   `json:"timed_out,omitempty" jsonschema:"true when timeout_seconds killed it"`
	Error          string `json:"error,omitempty" jsonschema:"why the command could not start, e.g. \"python4: command not found\" (exit_code 127) or a bad cwd (126); absent when it started"`
	Stdout         string `json:"stdout" jsonschema:"its standard output (bounded: see stdout_cut_bytes)"`
	Stderr         string `json:"stderr" jsonschema:"its standard error (bounded: see stderr_cut_bytes)"`
	StdoutBytes    int64  `json:"stdout_bytes" jsonschema:"how many bytes it wrote to stdout"`
	StderrBytes    int64  `json:"stderr_bytes" jsonschema:"how many bytes it wrote to stderr"`
	StdoutCutBytes int64  `json:"stdout_cut_bytes" jsonschema:"bytes cut from the middle of stdout (a note line in stdout marks the place); 0 when nothing was cut"`
	StderrCutBytes int64  `json:"stderr_cut_bytes" jsonschema:"bytes cut from the middle of stderr (a note line in stderr marks the place); 0 when nothing was cut"`
	DurationMs     int64  `json:"duration_ms" jsonschema:"how long it ran, in milliseconds"`
}

// StartProcessInput is the arguments of start_process.
type StartProcessInput struct {
	Sandbox string            `json:"sandbox" jsonschema:"The sandbox's ID or name, as create_sandbox or list_sandboxes gave it."`
	Command string            `json:"command,omitempty" jsonschema:"A shell command line, run with sh -c. Give command or argv, not both."`
	Argv    []string          `json:"argv,omitempty" jsonschema:"The command as an argument vector, run without a shell. Give command or argv, not both."`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"Absolute working directory in the sandbox; default /."`
	Env     map[string]string `json:"env,omitempty" jsonschema:"Environment variables added for the command."`
}

// ProcessInfo is a detached process as the tools describe it.
type ProcessInfo struct {
	Process  string `json:"process" jsonschema:"the process's ID, for read_process_output and kill_process"`
	Pid      int    `json:"pid" jsonschema:"its pid in the guest"`
	State    string `json:"state" jsonschema:"running, exited or lost"`
	ExitCode *int   `json:"exit_code,omitempty" jsonschema:"its exit code once exited, shell-style: 128+N when killed by signal N (137 after kill_process)"`
	Signal   int    `json:"signal,omitempty" jsonschema:"the signal that killed it, if one did (e.g. 9 after kill_process)"`
	Error    string `json:"error,omitempty" jsonschema:"why it could not start, e.g. \"python4: command not found\" (then state is exited, exit_code 127); absent when it started"`
}

// ReadProcessOutputInput is the arguments of read_process_output.
type ReadProcessOutputInput struct {
	Sandbox     string  `json:"sandbox" jsonschema:"The sandbox's ID or name."`
	Process     string  `json:"process" jsonschema:"The process ID start_process gave."`
	Offset      int64   `json:"offset,omitempty" jsonschema:"Where to start reading: 0 for the beginning, else the next_offset of the previous read (stdout and stderr are counted together)."`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"Wait up to this many seconds for output or for the process to end when there is nothing new yet; default 0 (answer at once), at most 60."`
}

// ReadProcessOutputOutput is the answer of read_process_output.
type ReadProcessOutputOutput struct {
	Stdout     string `json:"stdout" jsonschema:"standard output since offset"`
	Stderr     string `json:"stderr" jsonschema:"standard error since offset"`
	NextOffset int64  `json:"next_offset" jsonschema:"the offset to read from next time"`
	More       bool   `json:"more,omitempty" jsonschema:"true when more output is buffered than one answer holds: read again from next_offset"`
	ProcessInfo
}

// KillProcessInput is the arguments of kill_process.
type KillProcessInput struct {
	Sandbox string `json:"sandbox" jsonschema:"The sandbox's ID or name."`
	Process string `json:"process" jsonschema:"The process ID start_process gave."`
	Signal  string `json:"signal,omitempty" jsonschema:"Signal name or number, e.g. TERM, INT, 9; default KILL. It goes to the process's whole process group."`
}

// ReadFileInput is the arguments of read_file.
type ReadFileInput struct {
	Sandbox  string `json:"sandbox" jsonschema:"The sandbox's ID or name."`
	Path     string `json:"path" jsonschema:"Absolute path of a regular file in the sandbox."`
	Encoding string `json:"encoding,omitempty" jsonschema:"How to return the content: text (UTF-8), base64 (any bytes) or auto (default: text when the file is valid UTF-8 without NUL bytes, else base64)."`
}

// FileContent is the answer of read_file.
type FileContent struct {
	Path     string `json:"path" jsonschema:"the file's path"`
	Size     int64  `json:"size" jsonschema:"its size in bytes"`
	Mode     string `json:"mode" jsonschema:"its permission bits in octal"`
	Encoding string `json:"encoding" jsonschema:"text or base64: how content is encoded"`
	Content  string `json:"content" jsonschema:"the file's content"`
}

// WriteFileInput is the arguments of write_file.
type WriteFileInput struct {
	Sandbox  string    `json:"sandbox" jsonschema:"The sandbox's ID or name."`
	Path     string    `json:"path" jsonschema:"Absolute path of the file to write; it is replaced atomically if it exists."`
	Content  string    `json:"content" jsonschema:"The content, as encoding says."`
	Encoding string    `json:"encoding,omitempty" jsonschema:"text (default: content is written as UTF-8) or base64 (content is base64 of any bytes)."`
	Mode     OctalMode `json:"mode,omitempty" jsonschema:"Permission bits as octal digits: a string such as \"0755\" (a script) or \"600\", or the same digits as a number (755); default 0644."`
	Parents  bool      `json:"parents,omitempty" jsonschema:"Make missing parent directories."`
}

// FileInfo is a file as write_file and list_directory describe it.
type FileInfo struct {
	Name    string `json:"name" jsonschema:"its base name"`
	Path    string `json:"path" jsonschema:"its absolute path"`
	Type    string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size    int64  `json:"size" jsonschema:"its size in bytes"`
	Mode    string `json:"mode" jsonschema:"its permission bits in octal"`
	ModTime string `json:"mod_time" jsonschema:"when it was last modified (RFC 3339)"`
}

// fileInfo converts the API's file info.
func fileInfo(fi api.FileInfo) FileInfo {
	return FileInfo{Name: fi.Name, Path: fi.Path, Type: fi.Type, Size: fi.Size, Mode: fi.Mode, ModTime: fi.ModTime.UTC().Format(time.RFC3339Nano)}
}

// ListDirectoryInput is the arguments of list_directory.
type ListDirectoryInput struct {
	Sandbox string `json:"sandbox" jsonschema:"The sandbox's ID or name."`
	Path    string `json:"path" jsonschema:"Absolute path of a directory in the sandbox."`
}

// ListDirectoryOutput is the answer of list_directory.
type ListDirectoryOutput struct {
	Path    string     `json:"path" jsonschema:"the directory"`
	Entries []FileInfo `json:"entries" jsonschema:"its entries, by name"`
}

// SandboxInput is the arguments of tools that take only a sandbox.
type SandboxInput struct {
	Sandbox string `json:"sandbox" jsonschema:"The sandbox's ID or name."`
}

// SnapshotInput is the arguments of snapshot.
type SnapshotInput struct {
	Sandbox string `json:"sandbox" jsonschema:"The sandbox's ID or name; it keeps running."`
	Name    string `json:"name" jsonschema:"A unique name for the snapshot, to restore it by."`
}

// SnapshotInfo is a snapshot as the tools describe it.
type SnapshotInfo struct {
	ID            string `json:"id" jsonschema:"the snapshot's ID"`
	Name          string `json:"name" jsonschema:"its name"`
	Sandbox       string `json:"sandbox" jsonschema:"the ID of the sandbox it was taken of"`
	SandboxName   string `json:"sandbox_name,omitempty" jsonschema:"that sandbox's name, if it had one"`
	SourceRemoved bool   `json:"source_removed,omitempty" jsonschema:"true when that sandbox has been destroyed since (the snapshot still restores)"`
	CreatedAt     string `json:"created_at" jsonschema:"when it was taken (RFC 3339)"`
}

// RestoreInput is the arguments of restore.
type RestoreInput struct {
	Snapshot string `json:"snapshot" jsonschema:"The snapshot's name or ID."`
	Name     string `json:"name,omitempty" jsonschema:"A name for the new sandbox (with count > 1, names get -1, -2, ...)."`
	Count    int    `json:"count,omitempty" jsonschema:"How many independent sandboxes to restore; default 1."`
}

// SandboxesOutput is the answer of restore and list_sandboxes.
type SandboxesOutput struct {
	Sandboxes []SandboxInfo `json:"sandboxes" jsonschema:"the sandboxes"`
}

// ListSandboxesInput is the arguments of list_sandboxes.
type ListSandboxesInput struct {
	All    bool              `json:"all,omitempty" jsonschema:"List every sandbox of the daemon, not only those this session created."`
	Labels map[string]string `json:"labels,omitempty" jsonschema:"Only sandboxes with all these labels."`
}

// DestroyOutput is the answer of destroy_sandbox.
type DestroyOutput struct {
	Destroyed string `json:"destroyed" jsonschema:"the sandbox that was removed"`
}

// KillOutput is the answer of kill_process.
type KillOutput struct {
	Signalled string `json:"signalled" jsonschema:"the process that got the signal"`
}

// schemaFor is the input schema of T with the enumerations given per
// property.
func schemaFor[T any](enums map[string][]any) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: schema of %T: %v", *new(T), err))
	}
	for prop, values := range enums {
		s.Properties[prop].Enum = values
	}
	return s
}

// withTypes sets the JSON types property prop of s takes, and returns s.
func withTypes(s *jsonschema.Schema, prop string, types ...string) *jsonschema.Schema {
	s.Properties[prop].Type, s.Properties[prop].Types = "", types
	return s
}

// OctalMode is write_file's mode: octal digits, given as a JSON string
// ("0644", "755") or as a number whose decimal digits are the octal ones
// (644: JSON numbers have no leading zero). api.ParseMode checks it.
type OctalMode string

// UnmarshalJSON implements json.Unmarshaler: a string as it is, a number
// as its digits.
func (m *OctalMode) UnmarshalJSON(b []byte) error {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	switch v := v.(type) {
	case string:
		*m = OctalMode(v)
	case json.Number:
		*m = OctalMode(v.String())
	default:
		return api.Invalidf("mode is %s: give octal digits such as \"0644\"", b)
	}
	return nil
}

// addTool registers a tool whose handler's errors become tool errors
// carrying the API's code. A call whose context ended (the client
// cancelled it, or left) fails with the context's error, not mapped
// (the API's table would call it unavailable): nobody waits for its
// answer, which NewStdioTransport does not even send.
func addTool[In, Out any](s *Server, t *sdk.Tool, h func(ctx context.Context, req *sdk.CallToolRequest, in In) (Out, error)) {
	sdk.AddTool(s.srv, t, func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, Out, error) {
		if ran, ok := ctx.Value(handlerRan{}).(*bool); ok {
			*ran = true // its errors are ToolErrors (see argumentErrors)
		}
		out, err := h(ctx, req, in)
		if err != nil {
			var zero Out
			if cerr := ctx.Err(); cerr != nil {
				return nil, zero, cerr
			}
			return nil, zero, toolError(err)
		}
		return nil, out, nil
	})
}

// addTools registers every tool.
func (s *Server) addTools() {
	yes, no := true, false
	addTool(s, &sdk.Tool{
		Name:        "create_sandbox",
		Description: "Create and boot a new sandbox (a Linux VM) and answer with its id and name once it is running. It stays until destroy_sandbox, its TTL or idle timeout.",
		InputSchema: schemaFor[CreateSandboxInput](map[string][]any{"network": {"none", "allowlist", "open"}}),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, s.createSandbox)
	addTool(s, &sdk.Tool{
		Name: "run_command",
		Description: fmt.Sprintf("Run a command in a sandbox and wait for it: answers its exit code, stdout and stderr. "+
			"Each stream is bounded to %d bytes: past that its middle is cut and replaced by a note saying how many bytes were cut. "+
			"Sends progress notifications while it runs when asked (progress token).", s.outLim),
		Annotations: &sdk.ToolAnnotations{OpenWorldHint: &no},
	}, s.runCommand)
	addTool(s, &sdk.Tool{
		Name:        "start_process",
		Description: "Start a long-running command in the background in a sandbox (a server, a build) and answer at once with its process ID; read its output with read_process_output, stop it with kill_process.",
		Annotations: &sdk.ToolAnnotations{OpenWorldHint: &no},
	}, s.startProcess)
	addTool(s, &sdk.Tool{
		Name: "read_process_output",
		Description: fmt.Sprintf("Read a background process's output from offset on (at most %d bytes per call) and its state; "+
			"call again with next_offset to continue.", 2*s.outLim),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.readProcessOutput)
	addTool(s, &sdk.Tool{
		Name:        "kill_process",
		Description: "Send a signal (default KILL) to a background process started with start_process.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no},
	}, s.killProcess)
	addTool(s, &sdk.Tool{
		Name:        "read_file",
		Description: fmt.Sprintf("Read a file of a sandbox (at most %d bytes): text, or base64 for binary content.", s.fileLm),
		InputSchema: schemaFor[ReadFileInput](map[string][]any{"encoding": {"auto", "text", "base64"}}),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.readFile)
	addTool(s, &sdk.Tool{
		Name:        "write_file",
		Description: fmt.Sprintf("Write a file in a sandbox (at most %d bytes), replacing it if it exists: text, or base64 for binary content.", s.fileLm),
		InputSchema: withTypes(schemaFor[WriteFileInput](map[string][]any{"encoding": {"text", "base64"}}), "mode", "string", "integer"),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no},
	}, s.writeFile)
	addTool(s, &sdk.Tool{
		Name:        "list_directory",
		Description: "List a directory of a sandbox: name, type, size, mode and modification time of each entry.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.listDirectory)
	addTool(s, &sdk.Tool{
		Name:        "snapshot",
		Description: "Save a running sandbox's whole machine (memory, CPU, disk) as a named snapshot; the sandbox keeps running. restore makes new sandboxes from it; it stays (also after destroy_sandbox) until delete_snapshot.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, s.snapshot)
	addTool(s, &sdk.Tool{
		Name:        "restore",
		Description: "Make new, independent sandboxes from a snapshot, continuing where it was taken (running processes and files included).",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, s.restore)
	s.addSnapshotTools()
	addTool(s, &sdk.Tool{
		Name:        "list_sandboxes",
		Description: "List the sandboxes this session created (or, with all, every sandbox of the daemon): id, name, state, image, resources, labels.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.listSandboxes)
	addTool(s, &sdk.Tool{
		Name:        "destroy_sandbox",
		Description: "Stop a sandbox and remove it with its disk. It cannot be undone.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: false, OpenWorldHint: &no},
	}, s.destroySandbox)
}

// sessionLabels returns labels with the session's label added.
func (s *Server) sessionLabels(req *sdk.CallToolRequest, labels map[string]string) map[string]string {
	out := make(map[string]string, len(labels)+1)
	for k, v := range labels {
		out[k] = v
	}
	if req != nil {
		if id := s.sessionID(req.Session); id != "" {
			out[SessionLabel] = id
		}
	}
	return out
}

func (s *Server) createSandbox(ctx context.Context, req *sdk.CallToolRequest, in CreateSandboxInput) (SandboxInfo, error) {
	image := in.Image
	switch {
	case in.Template != "" && in.Image != "":
		return SandboxInfo{}, api.Invalidf("give template or image, not both")
	case in.Template != "":
		if s.cfg.ResolveTemplate == nil {
			return SandboxInfo{}, api.Invalidf("this server resolves no templates: give image, an image directory on the daemon's host")
		}
		dir, err := s.cfg.ResolveTemplate(ctx, in.Template)
		if err != nil {
			return SandboxInfo{}, fmt.Errorf("template %s: %w", api.QuoteShort(in.Template), err)
		}
		image = dir
	case image == "":
		if s.cfg.DefaultImage == "" {
			return SandboxInfo{}, api.Invalidf("give template (a profile name such as python) or image (an image directory on the daemon's host): this server has no default image")
		}
		image = s.cfg.DefaultImage
	}
	creq := api.CreateSandboxRequest{
		Image:     image,
		Name:      in.Name,
		VCPUs:     in.CPUs,
		MemoryMiB: in.MemoryMiB,
		Labels:    s.sessionLabels(req, in.Labels),
		Limits:    api.Limits{TTLSeconds: in.TTLSeconds, IdleTimeoutSeconds: in.IdleTimeoutSeconds},
	}
	if in.Network != "" || len(in.Allow) > 0 {
		creq.Network = &api.NetworkPolicy{Mode: in.Network, Allow: in.Allow}
	}
	sb, err := s.cl.CreateSandbox(ctx, creq)
	if err != nil {
		return SandboxInfo{}, err
	}
	return sandboxInfo(sb), nil
}

// commandArgv returns the argv of command (sh -c) or argv, exactly one
// of which must be given.
func commandArgv(command string, argv []string) ([]string, error) {
	switch {
	case command != "" && len(argv) > 0:
		return nil, api.Invalidf("give command (a shell command line) or argv (an argument vector), not both")
	case command != "":
		return []string{"/bin/sh", "-c", command}, nil
	case len(argv) > 0:
		return argv, nil
	}
	return nil, api.Invalidf("give command (a shell command line such as \"ls -l /tmp\") or argv (an argument vector such as [\"ls\", \"-l\", \"/tmp\"])")
}

// envList turns env into KEY=VALUE entries, sorted by key.
func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func (s *Server) runCommand(ctx context.Context, req *sdk.CallToolRequest, in RunCommandInput) (RunCommandOutput, error) {
	argv, err := commandArgv(in.Command, in.Argv)
	if err != nil {
		return RunCommandOutput{}, err
	}
	if in.TimeoutSeconds < 0 {
		return RunCommandOutput{}, api.Invalidf("timeout_seconds is %v: give a positive number of seconds, or leave it out", in.TimeoutSeconds)
	}
	ereq := api.ExecRequest{Cmd: argv, Cwd: in.Cwd, Env: envList(in.Env), TimeoutMs: int64(in.TimeoutSeconds * 1000)}
	if in.Stdin != "" {
		ereq.Stdin = []byte(in.Stdin)
	}
	stdout, stderr := newCapture(s.outLim), newCapture(s.outLim)
	stop := progress(ctx, req, s.cfg.ProgressInterval, func(d time.Duration) string {
		return fmt.Sprintf("running for %s; %d bytes of stdout, %d of stderr", d.Round(time.Second), stdout.Total(), stderr.Total())
	})
	st, err := s.cl.Exec(ctx, in.Sandbox, ereq, stdout, stderr)
	stop()
	if err != nil {
		return RunCommandOutput{}, err
	}
	out := RunCommandOutput{
		ExitCode:    st.ExitCode,
		Signal:      st.Signal,
		TimedOut:    st.TimedOut,
		Error:       st.Error,
		StdoutBytes: stdout.Total(),
		StderrBytes: stderr.Total(),
		DurationMs:  st.DurationMs,
	}
	out.Stdout, out.StdoutCutBytes = stdout.Result("stdout")
	out.Stderr, out.StderrCutBytes = stderr.Result("stderr")
	return out, nil
}

func (s *Server) startProcess(ctx context.Context, req *sdk.CallToolRequest, in StartProcessInput) (ProcessInfo, error) {
	argv, err := commandArgv(in.Command, in.Argv)
	if err != nil {
		return ProcessInfo{}, err
	}
	p, err := s.cl.StartProcess(ctx, in.Sandbox, api.ExecRequest{Cmd: argv, Cwd: in.Cwd, Env: envList(in.Env)})
	if err != nil {
		return ProcessInfo{}, err
	}
	return processInfo(p), nil
}

// processInfo converts the API's process.
func processInfo(p api.Process) ProcessInfo {
	pi := ProcessInfo{Process: p.ID, Pid: p.Pid, State: p.State}
	if p.Exit != nil {
		code := p.Exit.ExitCode
		pi.ExitCode, pi.Signal, pi.Error = &code, p.Exit.Signal, p.Exit.Error
	}
	return pi
}

// maxWait bounds read_process_output's wait_seconds.
const maxWait = 60 * time.Second

func (s *Server) readProcessOutput(ctx context.Context, req *sdk.CallToolRequest, in ReadProcessOutputInput) (ReadProcessOutputOutput, error) {
	if in.Offset < 0 {
		return ReadProcessOutputOutput{}, api.Invalidf("offset is %d: give 0 or the next_offset of the previous read", in.Offset)
	}
	if in.WaitSeconds < 0 || in.WaitSeconds > maxWait.Seconds() {
		return ReadProcessOutputOutput{}, api.Invalidf("wait_seconds is %v: give 0 to %v (call again to wait longer)", in.WaitSeconds, maxWait.Seconds())
	}
	if in.Offset > 0 {
		// An offset past the output is no next_offset this server gave:
		// say so rather than answer nothing from there.
		p, err := s.cl.GetProcess(ctx, in.Sandbox, in.Process)
		if err != nil {
			return ReadProcessOutputOutput{}, err
		}
		if in.Offset > p.OutputBytes {
			return ReadProcessOutputOutput{}, api.Invalidf("offset %d is past the end of the process's output (%d bytes so far): give 0 or the next_offset of the previous read", in.Offset, p.OutputBytes)
		}
	}
	b := &budget{left: 2 * s.outLim}
	var stdout, stderr []byte
	rctx, follow := ctx, in.WaitSeconds > 0
	if follow {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, min(time.Duration(in.WaitSeconds*float64(time.Second)), maxWait))
		defer cancel()
		// Following waits for the process's end; answer as soon as
		// anything came instead.
		got := make(chan struct{}, 1)
		wout, werr := b.writer(&stdout), b.writer(&stderr)
		notify := func(w writerFunc) writerFunc {
			return func(p []byte) (int, error) {
				n, err := w(p)
				select {
				case got <- struct{}{}:
				default:
				}
				return n, err
			}
		}
		var stopRead context.CancelFunc
		rctx, stopRead = context.WithCancel(rctx)
		defer stopRead()
		go func() {
			select {
			case <-got:
				// Let the rest of a burst arrive, then end the read.
				time.Sleep(100 * time.Millisecond)
				stopRead()
			case <-rctx.Done():
			}
		}()
		_, err := s.cl.ProcessOutput(rctx, in.Sandbox, in.Process, in.Offset, true, notify(wout), notify(werr))
		if err != nil && rctx.Err() == nil && !isBudget(err) {
			return ReadProcessOutputOutput{}, err
		}
	} else {
		_, err := s.cl.ProcessOutput(ctx, in.Sandbox, in.Process, in.Offset, false, b.writer(&stdout), b.writer(&stderr))
		if err != nil && !isBudget(err) {
			return ReadProcessOutputOutput{}, err
		}
	}
	if ctx.Err() != nil {
		return ReadProcessOutputOutput{}, ctx.Err()
	}
	p, err := s.cl.GetProcess(ctx, in.Sandbox, in.Process)
	if err != nil {
		return ReadProcessOutputOutput{}, err
	}
	next := in.Offset + b.got
	return ReadProcessOutputOutput{
		Stdout:      string(stdout),
		Stderr:      string(stderr),
		NextOffset:  next,
		More:        p.OutputBytes > next,
		ProcessInfo: processInfo(p),
	}, nil
}

// isBudget reports whether err is a read ended by its spent budget.
func isBudget(err error) bool { return errors.Is(err, errBudget) }

func (s *Server) killProcess(ctx context.Context, req *sdk.CallToolRequest, in KillProcessInput) (KillOutput, error) {
	if err := s.cl.KillProcess(ctx, in.Sandbox, in.Process, in.Signal); err != nil {
		return KillOutput{}, err
	}
	return KillOutput{Signalled: in.Process}, nil
}

func (s *Server) readFile(ctx context.Context, req *sdk.CallToolRequest, in ReadFileInput) (FileContent, error) {
	fi, err := s.cl.Stat(ctx, in.Sandbox, in.Path)
	if err != nil {
		return FileContent{}, err
	}
	if fi.Type == "file" && fi.Size > s.fileLm {
		return FileContent{}, s.tooLarge("file "+in.Path, fi.Size, "read part of it with run_command (head -c, tail -c, sed -n)")
	}
	var buf bytes.Buffer
	lim := &limitWriter{w: &buf, left: s.fileLm}
	fi, err = s.cl.Download(ctx, in.Sandbox, in.Path, lim)
	if err != nil {
		if lim.over {
			return FileContent{}, s.tooLarge("file "+in.Path, lim.seen, "read part of it with run_command (head -c, tail -c, sed -n)")
		}
		return FileContent{}, err
	}
	data := buf.Bytes()
	enc := in.Encoding
	if enc == "" || enc == "auto" {
		enc = "base64"
		if utf8.Valid(data) && bytes.IndexByte(data, 0) < 0 {
			enc = "text"
		}
	}
	out := FileContent{Path: fi.Path, Size: int64(len(data)), Mode: fi.Mode, Encoding: enc}
	switch enc {
	case "text":
		if !utf8.Valid(data) {
			return FileContent{}, api.Invalidf("file %s is not valid UTF-8 text: read it with encoding base64", api.QuoteShort(in.Path))
		}
		out.Content = string(data)
	case "base64":
		out.Content = base64.StdEncoding.EncodeToString(data)
	default:
		return FileContent{}, api.Invalidf("encoding is %s: use text, base64 or auto", api.QuoteShort(in.Encoding))
	}
	return out, nil
}

// tooLarge is the payload_too_large error of something of size bytes.
func (s *Server) tooLarge(what string, size int64, hint string) error {
	return api.Errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "%s is %d bytes, more than this server's limit of %d: %s", what, size, s.fileLm, hint)
}

// limitWriter passes at most left bytes to w, then fails.
type limitWriter struct {
	w    *bytes.Buffer
	left int64
	seen int64
	over bool
}

// Write implements io.Writer.
func (l *limitWriter) Write(p []byte) (int, error) {
	l.seen += int64(len(p))
	if int64(len(p)) > l.left {
		l.over = true
		return 0, errBudget
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
}

func (s *Server) writeFile(ctx context.Context, req *sdk.CallToolRequest, in WriteFileInput) (FileInfo, error) {
	var data []byte
	switch in.Encoding {
	case "", "text":
		data = []byte(in.Content)
	case "base64":
		var err error
		data, err = base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			if data, err = base64.RawStdEncoding.DecodeString(in.Content); err != nil {
				return FileInfo{}, api.Invalidf("content is not base64 (standard alphabet): %v", err)
			}
		}
	default:
		return FileInfo{}, api.Invalidf("encoding is %s: use text or base64", api.QuoteShort(in.Encoding))
	}
	if int64(len(data)) > s.fileLm {
		return FileInfo{}, s.tooLarge("content", int64(len(data)), "write it in parts with run_command (cat >> FILE) or copy it with the agentbox CLI (agentbox cp)")
	}
	var perm fs.FileMode // 0: the API's 0644
	if in.Mode != "" {
		m, err := api.ParseMode(string(in.Mode))
		if err != nil {
			return FileInfo{}, err
		}
		perm = m
	}
	fi, err := s.cl.Upload(ctx, in.Sandbox, in.Path, bytes.NewReader(data), perm, in.Parents)
	if err != nil {
		return FileInfo{}, err
	}
	return fileInfo(fi), nil
}

func (s *Server) listDirectory(ctx context.Context, req *sdk.CallToolRequest, in ListDirectoryInput) (ListDirectoryOutput, error) {
	list, err := s.cl.List(ctx, in.Sandbox, in.Path)
	if err != nil {
		return ListDirectoryOutput{}, err
	}
	out := ListDirectoryOutput{Path: in.Path, Entries: make([]FileInfo, 0, len(list))}
	for _, fi := range list {
		out.Entries = append(out.Entries, fileInfo(fi))
	}
	return out, nil
}

func (s *Server) restore(ctx context.Context, req *sdk.CallToolRequest, in RestoreInput) (SandboxesOutput, error) {
	rreq := api.RestoreRequest{Name: in.Name, Labels: s.sessionLabels(req, nil), Count: in.Count}
	var list []api.Sandbox
	if in.Count > 1 {
		l, err := s.cl.RestoreSnapshots(ctx, in.Snapshot, rreq)
		if err != nil {
			return SandboxesOutput{}, err
		}
		list = l
	} else {
		rreq.Count = 0
		sb, err := s.cl.RestoreSnapshot(ctx, in.Snapshot, rreq)
		if err != nil {
			return SandboxesOutput{}, err
		}
		list = []api.Sandbox{sb}
	}
	out := SandboxesOutput{Sandboxes: make([]SandboxInfo, 0, len(list))}
	for _, sb := range list {
		out.Sandboxes = append(out.Sandboxes, sandboxInfo(sb))
	}
	return out, nil
}

func (s *Server) listSandboxes(ctx context.Context, req *sdk.CallToolRequest, in ListSandboxesInput) (SandboxesOutput, error) {
	labels := in.Labels
	if !in.All {
		labels = s.sessionLabels(req, labels)
	}
	list, err := s.cl.ListSandboxes(ctx, labels, "")
	if err != nil {
		return SandboxesOutput{}, err
	}
	out := SandboxesOutput{Sandboxes: make([]SandboxInfo, 0, len(list))}
	for _, sb := range list {
		out.Sandboxes = append(out.Sandboxes, sandboxInfo(sb))
	}
	return out, nil
}

func (s *Server) destroySandbox(ctx context.Context, req *sdk.CallToolRequest, in SandboxInput) (DestroyOutput, error) {
	if err := s.cl.DeleteSandbox(ctx, in.Sandbox, true); err != nil {
		return DestroyOutput{}, err
	}
	return DestroyOutput{Destroyed: in.Sandbox}, nil
}
