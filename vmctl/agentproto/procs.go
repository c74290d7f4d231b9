package agentproto

import (
	"encoding/binary"
	"fmt"
)

// Detached processes kept by the guest agent (the proc-* operations).
//
// A detached process is started with OpProcSpawn under an id the host
// chooses, and is kept by the guest agent, not by the host session that
// started it: it keeps running, its output is kept and its exit status is
// recorded while no host is connected, and any later session lists it
// (OpProcList), reads its output from an offset (OpProcOutput), writes its
// stdin (OpProcStdin), signals it (OpProcSignal), waits for its end
// (OpProcWait), resizes its terminal (OpProcResize, a process started with
// Exec.Tty) and finally forgets it (OpProcForget). Its stdout and stderr
// share one offset space in arrival order, of which the agent keeps the
// last ProcRingBytes; the agent keeps at most ProcMax processes.

// Limits of the guest agent's detached processes.
const (
	// ProcRingBytes is the output a detached process keeps in guest
	// memory: its last 1 MiB of stdout and stderr together.
	ProcRingBytes = 1 << 20
	// ProcMax is how many detached processes the guest agent keeps,
	// running and ended ones together. To spawn one more the oldest ended
	// one is forgotten; when all of them still run, OpProcSpawn fails with
	// CodeProcLimit.
	ProcMax = 64
)

// Error codes of the proc-* operations, beside the general ones
// (CodeNotFound for an unknown id, CodeExists for an id in use,
// CodeInvalid for a malformed request).
const (
	// CodeProcExited: the process has ended, so it takes no stdin and no
	// signal.
	CodeProcExited ErrorCode = "proc-exited"
	// CodeProcRunning: OpProcForget of a process that still runs.
	CodeProcRunning ErrorCode = "proc-running"
	// CodeStdinClosed: the process's stdin was never open or was closed.
	CodeStdinClosed ErrorCode = "stdin-closed"
	// CodeProcLimit: ProcMax processes are kept and all of them run.
	CodeProcLimit ErrorCode = "proc-limit"
	// CodeNoTty: OpProcResize of a process that runs without a terminal.
	CodeNoTty ErrorCode = "no-tty"
)

// Detached process states, the values of ProcInfo.State.
const (
	// ProcRunning: the command runs.
	ProcRunning = "running"
	// ProcExited: the command ended; ProcInfo.Exit says how.
	ProcExited = "exited"
	// ProcLost: the agent could not learn how the command ended.
	ProcLost = "lost"
)

// ProcSpawnRequest is the request of OpProcSpawn.
type ProcSpawnRequest struct {
	// ID names the process in the agent's table; unique among the kept
	// processes, 1-64 bytes of [A-Za-z0-9._-].
	ID string `json:"id"`
	// Exec is the command; Exec.Stdin keeps its stdin open for
	// OpProcStdin (else it reads StdinData, then EOF). With Exec.Tty the
	// stdin is always open: OpProcStdin writes the terminal's input.
	Exec ExecRequest `json:"exec"`
	// StdinData is written to the command's stdin first.
	StdinData []byte `json:"stdin_data,omitempty"`
}

// ProcRef names a detached process (OpProcWait, OpProcForget).
type ProcRef struct {
	// ID is the process's id.
	ID string `json:"id"`
}

// ProcListRequest is the request of OpProcList.
type ProcListRequest struct {
	// ID, if set, lists only that process (CodeNotFound if unknown).
	ID string `json:"id,omitempty"`
}

// ProcList is the FrameResponse of OpProcList.
type ProcList struct {
	// Procs are the kept processes, oldest first.
	Procs []ProcInfo `json:"procs"`
}

// ProcInfo describes a detached process. It is also the guest table's own
// snapshot (vmctl/guestagent/procs answers it as it is); the host keeps
// its own account in vmctl/process.Info, and the REST API answers
// api.Process: process.Info says why they are three.
type ProcInfo struct {
	// ID is the host's id of the process.
	ID string `json:"id"`
	// Pid is the guest process id (and process group id); 0 if it did
	// not start.
	Pid int `json:"pid"`
	// Argv is its command line.
	Argv []string `json:"argv"`
	// State is ProcRunning, ProcExited or ProcLost.
	State string `json:"state"`
	// Exit is set when State is ProcExited (a start failure is an exit
	// with ErrorKind).
	Exit *ExitStatus `json:"exit,omitempty"`
	// Error says why it is ProcLost.
	Error string `json:"error,omitempty"`
	// StdinOpen says whether OpProcStdin still accepts bytes.
	StdinOpen bool `json:"stdin_open,omitempty"`
	// Tty is the current size of its terminal when it was started with
	// Exec.Tty (OpProcResize changes it); nil without a terminal.
	Tty *TtySize `json:"tty,omitempty"`
	// OutputBytes is the total of stdout and stderr bytes produced: the
	// end offset of its output.
	OutputBytes int64 `json:"output_bytes"`
	// OutputDropped is how many of the oldest output bytes fell out of
	// the ring: the smallest offset OpProcOutput can still read.
	OutputDropped int64 `json:"output_dropped,omitempty"`
	// StartedNs and EndedNs (0 while running) are guest realtime clock
	// readings in nanoseconds since the Unix epoch.
	StartedNs int64 `json:"started_ns"`
	EndedNs   int64 `json:"ended_ns,omitempty"`
}

// ProcOutputRequest is the request of OpProcOutput.
type ProcOutputRequest struct {
	// ID is the process's id.
	ID string `json:"id"`
	// Offset is the first byte wanted, in the combined output.
	Offset int64 `json:"offset"`
	// Follow keeps the stream open for new output until the process
	// ended (and all its output was sent) or the host closes its side.
	Follow bool `json:"follow,omitempty"`
}

// ProcOutputEnd is the FrameResponse that ends an OpProcOutput stream.
type ProcOutputEnd struct {
	// Info is the process as of the last chunk sent: when it is not
	// running, every byte up to Info.OutputBytes was sent.
	Info ProcInfo `json:"info"`
	// Dropped is set when the stream ended because offset Next had
	// fallen out of the ring (asked for, or a follower fell behind):
	// Info.OutputDropped bytes are gone; read on from there.
	Dropped bool `json:"dropped,omitempty"`
	// Next is the offset after the last byte sent (the requested offset
	// when nothing was sent).
	Next int64 `json:"next"`
}

// ProcStdinRequest is the request of OpProcStdin.
type ProcStdinRequest struct {
	// ID is the process's id.
	ID string `json:"id"`
	// Close closes the command's stdin after the bytes (EOF).
	Close bool `json:"close,omitempty"`
}

// ProcStdinResult is the FrameResponse of OpProcStdin.
type ProcStdinResult struct {
	// Bytes is how many bytes the command's stdin pipe accepted.
	Bytes int64 `json:"bytes"`
}

// ProcSignalRequest is the request of OpProcSignal.
type ProcSignalRequest struct {
	// ID is the process's id.
	ID string `json:"id"`
	// Signal is the Linux signal number, sent to its process group.
	Signal int `json:"signal"`
}

// ProcResizeRequest is the request of OpProcResize.
type ProcResizeRequest struct {
	// ID is the process's id.
	ID string `json:"id"`
	// Tty is the terminal's new size; the kernel sends SIGWINCH to the
	// terminal's foreground process group.
	Tty TtySize `json:"tty"`
}

// Streams of a ProcChunk.
const (
	ProcStdout byte = 1
	ProcStderr byte = 2
)

// procChunkHeader is the size of a FrameProcOutput header: stream, offset.
const procChunkHeader = 1 + 8

// ProcChunk is a piece of a detached process's output, the payload of a
// FrameProcOutput frame.
type ProcChunk struct {
	// Stream is ProcStdout or ProcStderr.
	Stream byte
	// Offset is the position of Data in the combined output.
	Offset int64
	// Data is at most ChunkSize bytes.
	Data []byte
}

// AppendProcChunk appends the FrameProcOutput payload of c to b.
func AppendProcChunk(b []byte, c ProcChunk) []byte {
	b = append(b, c.Stream)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Offset))
	return append(b, c.Data...)
}

// DecodeProcChunk decodes a FrameProcOutput payload; Data aliases p.
// Errors: a payload shorter than its header, an unknown stream, a
// negative offset.
func DecodeProcChunk(p []byte) (ProcChunk, error) {
	if len(p) < procChunkHeader {
		return ProcChunk{}, fmt.Errorf("agentproto: proc-output frame of %d bytes, want at least %d", len(p), procChunkHeader)
	}
	c := ProcChunk{Stream: p[0], Offset: int64(binary.BigEndian.Uint64(p[1:9])), Data: p[procChunkHeader:]}
	if c.Stream != ProcStdout && c.Stream != ProcStderr {
		return ProcChunk{}, fmt.Errorf("agentproto: proc-output frame of stream %d", c.Stream)
	}
	if c.Offset < 0 {
		return ProcChunk{}, fmt.Errorf("agentproto: proc-output frame at offset %d", c.Offset)
	}
	return c, nil
}

// ValidProcID checks a detached process id: 1-64 bytes of [A-Za-z0-9._-].
// Errors are *Error with CodeInvalid.
func ValidProcID(id string) error {
	if id == "" || len(id) > 64 {
		return invalidf("process id %q: want 1-64 characters", id)
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return invalidf("process id %q: only letters, digits, '.', '_' and '-'", id)
		}
	}
	return nil
}

// validateProc checks the argument of a proc-* operation.
func (r *Request) validateProc() error {
	switch r.Op {
	case OpProcSpawn:
		if r.ProcSpawn == nil {
			break
		}
		if err := r.ProcSpawn.Exec.Validate(); err != nil {
			return err
		}
		return ValidProcID(r.ProcSpawn.ID)
	case OpProcList:
		if r.ProcList == nil {
			break
		}
		if r.ProcList.ID == "" {
			return nil
		}
		return ValidProcID(r.ProcList.ID)
	case OpProcWait, OpProcForget:
		if r.Proc == nil {
			break
		}
		return ValidProcID(r.Proc.ID)
	case OpProcOutput:
		if r.ProcOutput == nil {
			break
		}
		if r.ProcOutput.Offset < 0 {
			return invalidf("proc-output: negative offset %d", r.ProcOutput.Offset)
		}
		return ValidProcID(r.ProcOutput.ID)
	case OpProcStdin:
		if r.ProcStdin == nil {
			break
		}
		return ValidProcID(r.ProcStdin.ID)
	case OpProcSignal:
		if r.ProcSignal == nil {
			break
		}
		if s := r.ProcSignal.Signal; s < 1 || s > 64 {
			return invalidf("proc-signal: invalid signal %d", s)
		}
		return ValidProcID(r.ProcSignal.ID)
	case OpProcResize:
		if r.ProcResize == nil {
			break
		}
		if err := r.ProcResize.Tty.Validate(); err != nil {
			return err
		}
		return ValidProcID(r.ProcResize.ID)
	}
	return invalidf("op %q without its arguments", r.Op)
}
