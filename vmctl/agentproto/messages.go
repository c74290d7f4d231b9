package agentproto

import (
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Op names an operation; it is the "op" field of a [Request]. Values are
// part of the protocol.
type Op string

// Operations. Each describes the frames exchanged on its stream after the
// host's FrameRequest. Any operation may instead end with one FrameError.
const (
	// OpExec runs a command ([ExecRequest]). Guest→host: FrameStarted once
	// the process runs (omitted if it could not start), then FrameStdout
	// and FrameStderr in any order, then exactly one FrameExit. Host→guest,
	// until FrameExit: FrameStdin, FrameStdinClose, FrameSignal, and
	// FrameResize when the exec has a terminal (ExecRequest.Tty). If the
	// host's side of the stream ends before FrameExit was sent, the guest
	// kills the process group (the host abandoned the command).
	OpExec Op = "exec"
	// OpSignal signals the process group of a running exec started by this
	// agent ([SignalRequest]); a FrameResponse with an empty JSON object
	// follows. It exists besides FrameSignal because an exec stream may be
	// blocked by stdin back-pressure exactly when the user hits Ctrl-C.
	OpSignal Op = "signal"
	// OpReadFile streams a regular file ([PathRequest]): FrameData frames
	// (at most ChunkSize bytes each) then FrameDataEnd.
	OpReadFile Op = "read-file"
	// OpWriteFile replaces a file atomically ([WriteFileRequest]): the host
	// streams FrameData then FrameDataEnd; the guest writes a temporary
	// file in the same directory, fsyncs, chmods and renames it into place,
	// then answers a FrameResponse with [WriteFileResponse].
	OpWriteFile Op = "write-file"
	// OpStat answers a FrameResponse with the [FileInfo] of a path
	// ([PathRequest]), following symbolic links.
	OpStat Op = "stat"
	// OpList lists a directory ([PathRequest]): FrameData frames, each a
	// JSON array of [FileInfo] (entries sorted by name, not following
	// symbolic links), then FrameDataEnd.
	OpList Op = "list"
	// OpMkdir creates a directory ([MkdirRequest]); FrameResponse {}.
	OpMkdir Op = "mkdir"
	// OpRemove removes a path ([RemoveRequest]); FrameResponse {}.
	OpRemove Op = "remove"
	// OpPing answers a FrameResponse with [PingResponse].
	OpPing Op = "ping"
	// OpSetTime sets the guest's realtime clock ([SetTimeRequest]);
	// FrameResponse {}.
	OpSetTime Op = "settime"
	// OpShutdown powers the guest off or reboots it
	// ([ShutdownRequest]); the guest answers FrameResponse {} first.
	OpShutdown Op = "shutdown"
	// OpIdentity gives a restored guest its own identity
	// ([IdentityRequest]): hostname and /etc/machine-id; FrameResponse
	// with [IdentityResponse].
	OpIdentity Op = "identity"
	// OpConfigureNetwork (re)configures the guest's NIC
	// ([NetworkRequest]): address, default route, /etc/resolv.conf and
	// host.agentbox.internal in /etc/hosts, e.g. after a snapshot restore
	// gave the sandbox a new subnet; FrameResponse {}.
	OpConfigureNetwork Op = "configure-network"
	// OpProcSpawn starts a detached process kept by the guest agent
	// ([ProcSpawnRequest]); FrameResponse with its [ProcInfo]. It outlives
	// the host session (see procs.go for the proc-* operations).
	OpProcSpawn Op = "proc-spawn"
	// OpProcList answers a FrameResponse with [ProcList]: the agent's
	// detached processes ([ProcListRequest] may name one).
	OpProcList Op = "proc-list"
	// OpProcWait waits until a detached process ended ([ProcRef]);
	// FrameResponse with its final [ProcInfo].
	OpProcWait Op = "proc-wait"
	// OpProcOutput streams a detached process's output
	// ([ProcOutputRequest]): FrameProcOutput frames, then one
	// FrameResponse with [ProcOutputEnd].
	OpProcOutput Op = "proc-output"
	// OpProcStdin writes to a detached process's stdin
	// ([ProcStdinRequest]): the host sends FrameStdin frames then
	// FrameDataEnd; FrameResponse with [ProcStdinResult].
	OpProcStdin Op = "proc-stdin"
	// OpProcSignal signals a detached process's group
	// ([ProcSignalRequest]); FrameResponse {}.
	OpProcSignal Op = "proc-signal"
	// OpProcForget drops an ended detached process, its output and status
	// ([ProcRef]); FrameResponse {}.
	OpProcForget Op = "proc-forget"
	// OpProcResize sets the terminal size of a detached process started
	// with ExecRequest.Tty ([ProcResizeRequest]); FrameResponse with its
	// [ProcInfo] (CodeNoTty for one without a terminal).
	OpProcResize Op = "proc-resize"
	// OpConnect opens a TCP connection to a port on the guest's loopback
	// ([ConnectRequest]) and carries its bytes both ways (connect.go):
	// FrameResponse {} once connected, then FrameData / FrameDataEnd in
	// both directions; see [Conn].
	OpConnect Op = "connect"
	// OpReseed mixes host randomness into the guest kernel's entropy
	// pool and reseeds its CRNG ([ReseedRequest]); FrameResponse with
	// [ReseedResponse]. The host sends it after every restore.
	OpReseed Op = "reseed"
	// OpWatch watches a path for changes ([WatchRequest]): a FrameResponse
	// with [WatchStarted] once the watch is in place, then FrameData
	// frames, each a JSON array of [WatchEvent], until the host closes its
	// side; FrameDataEnd when the watched path itself was removed or
	// moved. See watch.go.
	OpWatch Op = "watch"
	// OpTrustCA makes the guest trust a certificate authority
	// ([TrustCARequest], trustca.go): the sandbox's own CA, whose key
	// stays on the host, for the egress proxy that puts secrets into
	// requests to their bound hosts. The guest writes it to TrustCAFile
	// and appends it to TrustCABundle unless it is there already;
	// FrameResponse {}. An agent older than the operation answers
	// CodeInvalid ("unknown op").
	OpTrustCA Op = "trust-ca"
)

// Request is the JSON payload of the FrameRequest that opens every stream.
// Exactly the field matching Op must be set (none for OpPing).
type Request struct {
	// Op selects the operation.
	Op Op `json:"op"`
	// Exec is set for OpExec.
	Exec *ExecRequest `json:"exec,omitempty"`
	// Signal is set for OpSignal.
	Signal *SignalRequest `json:"signal,omitempty"`
	// Path is set for OpReadFile, OpStat and OpList.
	Path *PathRequest `json:"path,omitempty"`
	// WriteFile is set for OpWriteFile.
	WriteFile *WriteFileRequest `json:"write_file,omitempty"`
	// Mkdir is set for OpMkdir.
	Mkdir *MkdirRequest `json:"mkdir,omitempty"`
	// Remove is set for OpRemove.
	Remove *RemoveRequest `json:"remove,omitempty"`
	// SetTime is set for OpSetTime.
	SetTime *SetTimeRequest `json:"set_time,omitempty"`
	// Shutdown is set for OpShutdown.
	Shutdown *ShutdownRequest `json:"shutdown,omitempty"`
	// Identity is set for OpIdentity.
	Identity *IdentityRequest `json:"identity,omitempty"`
	// Network is set for OpConfigureNetwork.
	Network *NetworkRequest `json:"network,omitempty"`
	// ProcSpawn is set for OpProcSpawn.
	ProcSpawn *ProcSpawnRequest `json:"proc_spawn,omitempty"`
	// ProcList is set for OpProcList.
	ProcList *ProcListRequest `json:"proc_list,omitempty"`
	// Proc is set for OpProcWait and OpProcForget.
	Proc *ProcRef `json:"proc,omitempty"`
	// ProcOutput is set for OpProcOutput.
	ProcOutput *ProcOutputRequest `json:"proc_output,omitempty"`
	// ProcStdin is set for OpProcStdin.
	ProcStdin *ProcStdinRequest `json:"proc_stdin,omitempty"`
	// ProcSignal is set for OpProcSignal.
	ProcSignal *ProcSignalRequest `json:"proc_signal,omitempty"`
	// ProcResize is set for OpProcResize.
	ProcResize *ProcResizeRequest `json:"proc_resize,omitempty"`
	// Connect is set for OpConnect.
	Connect *ConnectRequest `json:"connect,omitempty"`
	// Reseed is set for OpReseed.
	Reseed *ReseedRequest `json:"reseed,omitempty"`
	// Watch is set for OpWatch.
	Watch *WatchRequest `json:"watch,omitempty"`
	// Move is set for OpMove.
	Move *MoveRequest `json:"move,omitempty"`
	// TrustCA is set for OpTrustCA.
	TrustCA *TrustCARequest `json:"trust_ca,omitempty"`
}

// DefaultPath is the PATH of every command unless its Env overrides it;
// argv[0] without a slash is looked up in the command's PATH.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ExecRequest describes a command to run in the guest. There is no shell:
// Argv is passed to execve unchanged.
type ExecRequest struct {
	// Argv is the command and its arguments; at least one element.
	// Argv[0] without a "/" is looked up in the command's PATH; with a "/"
	// it is used as is (relative to Dir). No element may contain NUL.
	Argv []string `json:"argv"`
	// Env holds "KEY=VALUE" entries added to the guest's default
	// environment (PATH=[DefaultPath], HOME=/root, LANG=C.UTF-8, …),
	// replacing defaults with the same key.
	Env []string `json:"env,omitempty"`
	// Dir is the absolute working directory; empty means "/".
	Dir string `json:"dir,omitempty"`
	// UID, if set, is the user id the command runs as.
	UID *uint32 `json:"uid,omitempty"`
	// GID, if set, is the group id the command runs as; with UID set and
	// GID unset the group is UID's number.
	GID *uint32 `json:"gid,omitempty"`
	// User, if set, names the account the command runs as (a name, or a
	// uid as text), looked up in the guest's /etc/passwd: its uid and
	// primary gid, HOME, USER and LOGNAME from its entry, and its home as
	// the working directory when Dir is empty ("/" if the home is not a
	// directory). An unknown name fails the start with ExecBadUser. Not
	// together with UID or GID.
	User string `json:"user,omitempty"`
	// TimeoutMs bounds the command's run time in milliseconds; 0 means no
	// limit. On expiry the whole process group is killed with SIGKILL and
	// ExitStatus.TimedOut is set.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// Stdin says whether the host sends stdin frames. When false the
	// command's stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// Tty, if set, runs the command on a pseudo-terminal of that initial
	// size: the terminal is its stdin, stdout and stderr and its
	// controlling terminal (a new session), everything it writes comes as
	// FrameStdout (there is no FrameStderr), FrameStdin goes to the
	// terminal's input (so a 0x03 byte is a Ctrl-C the terminal's line
	// discipline turns into SIGINT for the foreground process group),
	// FrameStdinClose is ignored (the terminal stays open until the command
	// ends), and FrameResize changes the size (SIGWINCH). TERM is
	// xterm-256color unless Env sets it. Nil: no terminal, pipes.
	Tty *TtySize `json:"tty,omitempty"`
}

// TtySize is a terminal's window size in character cells, the payload of
// FrameResize and ExecRequest.Tty.
type TtySize struct {
	// Rows is the number of lines, 1–65535.
	Rows uint16 `json:"rows"`
	// Cols is the number of columns, 1–65535.
	Cols uint16 `json:"cols"`
}

// Validate checks that both dimensions are at least 1. Errors are *Error
// with CodeInvalid.
func (s TtySize) Validate() error {
	if s.Rows == 0 || s.Cols == 0 {
		return invalidf("terminal size %dx%d: rows and cols must be at least 1", s.Rows, s.Cols)
	}
	return nil
}

// Validate checks the request's shape (not whether the command exists).
// Errors are *Error with CodeInvalid.
func (r *ExecRequest) Validate() error {
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return invalidf("exec: empty argv")
	}
	for _, a := range r.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return invalidf("exec: argument %q contains NUL", a)
		}
	}
	for _, e := range r.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" || strings.IndexByte(e, 0) >= 0 {
			return invalidf("exec: env entry %q is not KEY=VALUE", e)
		}
	}
	if r.Dir != "" && !path.IsAbs(r.Dir) {
		return invalidf("exec: working directory %q is not absolute", r.Dir)
	}
	if r.User != "" {
		if r.UID != nil || r.GID != nil {
			return invalidf("exec: user %q together with a uid or gid", r.User)
		}
		if strings.ContainsAny(r.User, ":/\n\x00") {
			return invalidf("exec: user %q is not an account name", r.User)
		}
	}
	if r.TimeoutMs < 0 {
		return invalidf("exec: negative timeout %d ms", r.TimeoutMs)
	}
	if r.Tty != nil {
		if err := r.Tty.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// SignalMessage is the payload of a FrameSignal frame.
type SignalMessage struct {
	// Signal is the Linux signal number (e.g. 2 for SIGINT, 9 for SIGKILL).
	Signal int `json:"signal"`
}

// SignalRequest is the request of OpSignal.
type SignalRequest struct {
	// Pid is the process id reported in the exec's [Started] frame.
	Pid int `json:"pid"`
	// Signal is the Linux signal number.
	Signal int `json:"signal"`
}

// Started is the payload of a FrameStarted frame.
type Started struct {
	// Pid is the guest process id of the command, also its process group.
	Pid int `json:"pid"`
}

// ExecErrorKind says why a command could not be started. Values are part of
// the protocol.
type ExecErrorKind string

// Kinds of start failure.
const (
	// ExecNotFound: argv[0] is not in PATH or does not exist (shell: 127).
	ExecNotFound ExecErrorKind = "not-found"
	// ExecPermission: argv[0] is not executable by the user (EACCES,
	// shell: 126).
	ExecPermission ExecErrorKind = "permission"
	// ExecNotExecutable: argv[0] is not a valid executable format
	// (ENOEXEC, shell: 126).
	ExecNotExecutable ExecErrorKind = "not-executable"
	// ExecBadWorkdir: Dir does not exist or is not a directory.
	ExecBadWorkdir ExecErrorKind = "bad-workdir"
	// ExecBadUser: User is not an account in the guest's /etc/passwd.
	ExecBadUser ExecErrorKind = "bad-user"
	// ExecOther: any other start failure (fork failed, bad uid…).
	ExecOther ExecErrorKind = "other"
)

// ExitStatus is the payload of the FrameExit frame that ends an exec.
type ExitStatus struct {
	// Code is the exit code (0–255) when the process exited normally, and
	// -1 when it was killed by a signal or did not start.
	Code int `json:"code"`
	// Signal is the number of the signal that killed the process, 0 if it
	// exited normally.
	Signal int `json:"signal,omitempty"`
	// TimedOut is set when the guest killed the process group because
	// ExecRequest.TimeoutMs expired (Signal is then 9).
	TimedOut bool `json:"timed_out,omitempty"`
	// ErrorKind is set when the command could not start; Code is then -1.
	ErrorKind ExecErrorKind `json:"error_kind,omitempty"`
	// Error is the human-readable start failure, e.g.
	// "python4: command not found".
	Error string `json:"error,omitempty"`
}

// Exit codes of [ExitStatus.ShellCode] that are not the command's own.
const (
	ShellCodeTimeout       = 124 // killed on timeout, like coreutils timeout(1)
	ShellCodeNotExecutable = 126 // could not run: permission denied, not an executable, bad working directory…
	ShellCodeNotFound      = 127 // command not found
)

// ShellCode maps the status to the exit code a shell would report: Code
// when the process exited, 128+Signal when killed, ShellCodeTimeout on
// timeout, ShellCodeNotFound for ExecNotFound and ShellCodeNotExecutable
// for every other start failure (as `docker run` and `docker exec` report a
// command that cannot be run, e.g. a missing working directory; 125 stays
// agentbox's own failure).
func (s ExitStatus) ShellCode() int {
	switch {
	case s.ErrorKind == ExecNotFound:
		return ShellCodeNotFound
	case s.ErrorKind != "":
		return ShellCodeNotExecutable
	case s.TimedOut:
		return ShellCodeTimeout
	case s.Signal != 0:
		return 128 + s.Signal
	}
	return s.Code
}

// Err returns nil when the command started, otherwise an *ExecError with
// the kind and message.
func (s ExitStatus) Err() error {
	if s.ErrorKind == "" {
		return nil
	}
	return &ExecError{Kind: s.ErrorKind, Message: s.Error}
}

// ExecError is a start failure of a command, see [ExitStatus.Err].
type ExecError struct {
	// Kind is the failure category.
	Kind ExecErrorKind
	// Message is the human-readable failure, e.g. "python4: command not
	// found".
	Message string
}

// Error returns the message.
func (e *ExecError) Error() string { return e.Message }

// Is matches fs.ErrNotExist for ExecNotFound and fs.ErrPermission for
// ExecPermission.
func (e *ExecError) Is(target error) bool {
	return (e.Kind == ExecNotFound && target == fs.ErrNotExist) ||
		(e.Kind == ExecPermission && target == fs.ErrPermission)
}

// PathRequest is the request of OpReadFile, OpStat and OpList.
type PathRequest struct {
	// Path is an absolute guest path; it is cleaned by the guest.
	Path string `json:"path"`
}

// WriteFileRequest is the request of OpWriteFile.
type WriteFileRequest struct {
	// Path is the absolute guest path of the file to create or replace.
	Path string `json:"path"`
	// Mode holds the permission bits of the new file (fs.FileMode.Perm,
	// e.g. 0o644); the guest's umask does not apply.
	Mode fs.FileMode `json:"mode"`
	// Parents creates missing parent directories (mode 0o755).
	Parents bool `json:"parents,omitempty"`
	// Owner is the guest account (name or numeric uid, looked up in
	// /etc/passwd) the file and the directories Parents creates belong
	// to; empty means the agent's default user. An unknown account is
	// CodeInvalid. Agents before this field ignore it (the file goes to
	// the default user).
	Owner string `json:"owner,omitempty"`
}

// WriteFileResponse is the FrameResponse of OpWriteFile.
type WriteFileResponse struct {
	// Size is the number of bytes written.
	Size int64 `json:"size"`
}

// MkdirRequest is the request of OpMkdir.
type MkdirRequest struct {
	// Path is the absolute guest path of the directory.
	Path string `json:"path"`
	// Mode holds the permission bits (e.g. 0o755); 0 means 0o755.
	Mode fs.FileMode `json:"mode,omitempty"`
	// Parents creates missing parents and makes an existing directory at
	// Path a success, like mkdir -p. Without it an existing path is
	// CodeExists.
	Parents bool `json:"parents,omitempty"`
	// Owner is the guest account (name or numeric uid) the directories
	// made belong to, as in [WriteFileRequest].
	Owner string `json:"owner,omitempty"`
}

// RemoveRequest is the request of OpRemove.
type RemoveRequest struct {
	// Path is the absolute guest path to remove; "/" is refused.
	Path string `json:"path"`
	// Recursive removes a directory with its contents, like rm -r.
	// Without it a non-empty directory fails with CodeExists.
	Recursive bool `json:"recursive,omitempty"`
}

// FileType is the kind of a file in a [FileInfo]. Values are part of the
// protocol.
type FileType string

// File types.
const (
	TypeFile    FileType = "file"
	TypeDir     FileType = "dir"
	TypeSymlink FileType = "symlink"
	TypeOther   FileType = "other" // device, socket, fifo
)

// FileInfo describes a guest file, the FrameResponse of OpStat and the
// elements of OpList batches.
type FileInfo struct {
	// Name is the base name of the file.
	Name string `json:"name"`
	// Size is the length in bytes (for regular files; system-dependent
	// otherwise).
	Size int64 `json:"size"`
	// Mode is the Go fs.FileMode: type bits and permission bits.
	Mode fs.FileMode `json:"mode"`
	// ModTimeNs is the modification time in nanoseconds since the Unix
	// epoch.
	ModTimeNs int64 `json:"mtime_ns"`
	// Type is the file's kind, derived from Mode.
	Type FileType `json:"type"`
	// UID and GID are the numeric owner and group.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Owner and Group are their names from the guest's /etc/passwd and
	// /etc/group, the number in decimal when there is none. Agents before
	// these fields leave them empty.
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// LinkTarget is set when the path itself is a symbolic link: the
	// absolute path it resolves to (all links followed), or the link's
	// own text when that does not resolve (dangling, loop).
	LinkTarget string `json:"link_target,omitempty"`
}

// TypeOf returns the FileType of a fs.FileMode.
func TypeOf(m fs.FileMode) FileType {
	switch {
	case m.IsRegular():
		return TypeFile
	case m.IsDir():
		return TypeDir
	case m&fs.ModeSymlink != 0:
		return TypeSymlink
	}
	return TypeOther
}

// PingResponse is the FrameResponse of OpPing.
type PingResponse struct {
	// TimeNs is the guest's realtime clock in nanoseconds since the Unix
	// epoch when it answered.
	TimeNs int64 `json:"time_ns"`
}

// SetTimeRequest is the request of OpSetTime.
type SetTimeRequest struct {
	// UnixNs is the new time in nanoseconds since the Unix epoch.
	UnixNs int64 `json:"unix_ns"`
}

// ShutdownRequest is the request of OpShutdown.
type ShutdownRequest struct {
	// Reboot reboots instead of powering off.
	Reboot bool `json:"reboot,omitempty"`
}

// Empty is the FrameResponse payload of operations without a result.
type Empty struct{}

// CleanPath checks that p is absolute and returns it cleaned. Errors are
// *Error with CodeInvalid.
func CleanPath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", invalidf("path %q is not absolute", p)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", invalidf("path %q contains NUL", p)
	}
	return path.Clean(p), nil
}

func invalidf(format string, args ...any) error {
	return &Error{Code: CodeInvalid, Message: fmt.Sprintf(format, args...)}
}

// Validate checks that the field matching r.Op is set. Errors are *Error
// with CodeInvalid.
func (r *Request) Validate() error {
	var ok bool
	switch r.Op {
	case OpExec:
		if r.Exec == nil {
			break
		}
		return r.Exec.Validate()
	case OpSignal:
		ok = r.Signal != nil
	case OpReadFile, OpStat, OpList:
		ok = r.Path != nil
	case OpWriteFile:
		ok = r.WriteFile != nil
	case OpMkdir:
		ok = r.Mkdir != nil
	case OpRemove:
		ok = r.Remove != nil
	case OpSetTime:
		ok = r.SetTime != nil
	case OpShutdown:
		ok = r.Shutdown != nil
	case OpIdentity:
		if r.Identity == nil {
			break
		}
		return r.Identity.Validate()
	case OpConfigureNetwork:
		if r.Network == nil {
			break
		}
		return r.Network.Validate()
	case OpProcSpawn, OpProcList, OpProcWait, OpProcOutput, OpProcStdin, OpProcSignal, OpProcForget, OpProcResize:
		return r.validateProc()
	case OpConnect:
		if r.Connect == nil {
			break
		}
		return r.Connect.Validate()
	case OpReseed:
		if r.Reseed == nil {
			break
		}
		return r.Reseed.Validate()
	case OpWatch:
		if r.Watch == nil {
			break
		}
		return r.Watch.Validate()
	case OpMove:
		if r.Move == nil {
			break
		}
		return r.Move.Validate()
	case OpTrustCA:
		if r.TrustCA == nil {
			break
		}
		return r.TrustCA.Validate()
	case OpPing:
		ok = true
	default:
		return invalidf("unknown op %q", r.Op)
	}
	if !ok {
		return invalidf("op %q without its arguments", r.Op)
	}
	return nil
}
