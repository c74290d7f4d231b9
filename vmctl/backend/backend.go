package backend

import (
	"context"
	"io"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
)

// Backend is what every front needs from the daemon (vmctl/daemon
// implements it). Sandbox references (ref) are an ID or a name; the front
// has checked their syntax before calling. Guest paths are absolute and
// clean. The caller of each request is in ctx (api.CallerFrom).
//
// Errors are those of the layers below, wrapped with %w: errdefs
// categories and reason sentinels, answered through api.ErrorFrom (an
// *api.Error is answered as it is; an uncategorised error is 500
// internal). The statuses and codes named below are those answers.
type Backend interface {
	// Info describes the daemon and its capacity.
	Info(ctx context.Context) (api.Info, error)

	// CreateSandbox boots a sandbox and returns it running. Errors: 422
	// invalid_image, 409 name_taken, 429 capacity_exceeded, 503
	// unavailable (libvirt down, shutting down), 500 boot_failed.
	CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error)
	// ListSandboxes returns the sandboxes whose labels contain all of
	// labels (nil: all) and, if state != "", are in that state, oldest
	// first.
	ListSandboxes(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error)
	// GetSandbox returns one sandbox. Errors: 404 not_found.
	GetSandbox(ctx context.Context, ref string) (api.Sandbox, error)
	// StopSandbox stops a sandbox's domain and keeps its record and logs.
	// Stopping a stopped sandbox is not an error.
	StopSandbox(ctx context.Context, ref string) (api.Sandbox, error)
	// DeleteSandbox removes a sandbox and everything it holds. A running
	// one needs force (else 409 sandbox_running).
	DeleteSandbox(ctx context.Context, ref string, force bool) error

	// Exec runs a command attached: started is called once it runs, output
	// goes to stdout/stderr as it arrives, and the status returns at its
	// end. Errors: 409 sandbox_not_running, 429 exec_limit_reached,
	// 503 guest_died.
	Exec(ctx context.Context, ref string, req api.ExecRequest, started func(execID string, pid int), stdout, stderr io.Writer) (api.ExitStatus, error)
	// ExecInteractive runs a command attached with a live stdin (the
	// interactive exec, GET .../exec/ws): as Exec (the same admission,
	// accounting, audit and history), but stdin streams from stdin (after
	// req.Stdin) until its EOF and is read only as fast as the command
	// takes it, req.Tty gives the command a terminal, and started hands
	// over the running command's controls. Errors as Exec.
	ExecInteractive(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error)

	// StartProcess starts a detached command and returns at once.
	StartProcess(ctx context.Context, ref string, req api.ExecRequest) (api.Process, error)
	// ListProcesses lists a sandbox's detached processes, oldest first.
	ListProcesses(ctx context.Context, ref string) ([]api.Process, error)
	// GetProcess returns one detached process. Errors: 404 not_found.
	GetProcess(ctx context.Context, ref, pid string) (api.Process, error)
	// ProcessOutput sends the process's output from byte offset on to emit
	// ("stdout"/"stderr" events with Offset), then its "exit" event if it
	// has ended. With follow it waits for more output until the process
	// ends or ctx is done. Errors: 404, 410 output_dropped when offset fell
	// out of the buffer.
	ProcessOutput(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error
	// WriteStdin copies r to the process's stdin and closes it after if
	// closeAfter. Errors: 409 stdin_closed, 409 process_exited.
	WriteStdin(ctx context.Context, ref, pid string, r io.Reader, closeAfter bool) (int64, error)
	// KillProcess signals the process group. signal is a name or number.
	KillProcess(ctx context.Context, ref, pid, signal string) error

	// Upload writes r atomically to req.Path (mode, parents and owner as
	// req says) and returns the new file's info.
	Upload(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error)
	// Download stats path (a regular file, else 422 not_a_file) and calls
	// open with its info before streaming its content to the writer open
	// returns; 404 when missing.
	Download(ctx context.Context, ref, path string, open func(api.FileInfo) io.Writer) error
	// Stat describes path. Errors: 404.
	Stat(ctx context.Context, ref, path string) (api.FileInfo, error)
	// List lists a directory, sorted by name, and with depth > 1 its
	// subdirectories' entries too (each directory's entries right after
	// it; symbolic links not followed) down to depth levels. Errors: 404,
	// 422 not_a_directory.
	List(ctx context.Context, ref, path string, depth int) ([]api.FileInfo, error)
	// Move renames req.Source to req.Destination and returns the
	// destination's info. Errors: 404, 409 already_exists (a non-empty
	// directory at the destination), 400 (across filesystems).
	Move(ctx context.Context, ref string, req api.MoveRequest) (api.FileInfo, error)
	// Mkdir creates a directory.
	Mkdir(ctx context.Context, ref string, req api.MkdirRequest) error
	// RemoveFile removes path (recursively if asked).
	RemoveFile(ctx context.Context, ref, path string, recursive bool) error

	// ExecHistory returns the sandbox's exec history, oldest first: the
	// newest limit entries when limit > 0. Errors: 404.
	ExecHistory(ctx context.Context, ref string, limit int) ([]api.ExecRecord, error)

	// Console copies the sandbox's serial console log (the last tail bytes
	// when tail > 0) to w.
	Console(ctx context.Context, ref string, tail int64, w io.Writer) error
	// Audit sends the audit entries of one sandbox (ref != "", also after
	// it was removed, by ID) or of all (ref == ""), oldest first.
	Audit(ctx context.Context, ref string, emit func(audit.Entry) error) error
	// Events sends sandbox events as they happen until ctx is done.
	Events(ctx context.Context, emit func(api.Event) error) error
}

// ExecControl is a running interactive command (Backend.ExecInteractive).
type ExecControl interface {
	// ExecID is the exec's ID in the sandbox's history and audit log.
	ExecID() string
	// Pid is the guest process id (also its process group).
	Pid() int
	// Resize sets the size of the command's terminal (SIGWINCH in the
	// guest). Errors: 400 invalid_argument when the command runs without
	// a terminal or size is out of range. A command that just ended is no
	// error (its exit follows).
	Resize(size api.TtySize) error
	// Signal sends signal (a name like "INT" or a number 1-64) to the
	// command's process group. Errors: 400 invalid_argument for an
	// unknown signal. A command that just ended is no error.
	Signal(ctx context.Context, signal string) error
}
