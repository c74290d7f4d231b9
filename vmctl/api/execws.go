package api

// The interactive exec: GET /v1/sandboxes/{id}/exec/ws upgrades to one
// WebSocket connection that carries a command's stdin, output, terminal
// size, signals and exit status both ways.
//
// Messages:
//
//   - Text messages are JSON [ExecWSMessage] control messages. The client's
//     first message is "start" with the ExecRequest (in the message rather
//     than the URL, so env values never reach access logs); later it may
//     send "resize" (a command with a terminal only), "signal" and
//     "stdin_close". The server answers "started" once the command runs,
//     and ends with exactly one "exit" or "error", then closes the
//     connection with status 1000 (normal closure).
//   - Binary messages carry bytes: the first byte is the stream
//     (ExecWSStdin from the client, ExecWSStdout or ExecWSStderr from the
//     server), the rest its data, unchanged (at most ExecWSMaxData bytes).
//     A command with a terminal (ExecRequest.Tty) has all its output on
//     stdout.
//
// Any protocol violation by the client (a message before "start", a
// malformed or unknown message, a resize of a command without a terminal,
// an unknown signal) ends the session with an "error" message (400
// invalid_argument) and kills the command. Closing the connection kills
// the command too.
//
// Back-pressure: the server reads the next message only once the command's
// stdin took the previous data, and sends output only as fast as the
// client reads it; neither side buffers more than one message, so a slow
// client slows the command, which blocks on its full output.

// Streams of binary messages: the first byte of each.
const (
	ExecWSStdin  byte = 0 // client → server: bytes for the command's stdin
	ExecWSStdout byte = 1 // server → client: bytes the command wrote to stdout
	ExecWSStderr byte = 2 // server → client: bytes the command wrote to stderr
)

// ExecWSMaxData is the most data bytes one binary message carries (the
// server's output chunks; the client's stdin messages must not exceed it).
const ExecWSMaxData = 64 << 10

// ExecWSMaxMessage is the most bytes one message of the client may have
// (a binary message's stream byte and data, or a text message); a larger
// one closes the connection with status 1009 (message too big).
const ExecWSMaxMessage = ExecWSMaxData + 1

// Types of ExecWSMessage.
const (
	ExecWSStart      = "start"       // client, first message: Exec
	ExecWSResize     = "resize"      // client: Tty, the new terminal size
	ExecWSSignal     = "signal"      // client: Signal for the command's process group
	ExecWSStdinClose = "stdin_close" // client: end of stdin (ignored with a terminal)
	ExecWSStarted    = "started"     // server: ExecID and Pid
	ExecWSExit       = "exit"        // server, last: Exit
	ExecWSError      = "error"       // server, last: Error
)

// ExecWSMessage is a text (control) message of the interactive exec
// WebSocket; Type says which fields are set.
type ExecWSMessage struct {
	// Type is one of the ExecWS* message types.
	Type string `json:"type"`
	// Exec is the command to run ("start"); its Stdin bytes, if any, come
	// before the stdin messages; StdinOpen is refused.
	Exec *ExecRequest `json:"exec,omitempty"`
	// Tty is the terminal's new size ("resize").
	Tty *TtySize `json:"tty,omitempty"`
	// Signal is a signal name like "INT" or "TERM" or a number 1–64
	// ("signal"), as KillRequest.Signal.
	Signal string `json:"signal,omitempty"`
	// ExecID identifies the exec in the sandbox's history and audit log
	// ("started").
	ExecID string `json:"exec_id,omitempty"`
	// Pid is the guest process id ("started").
	Pid int `json:"pid,omitempty"`
	// Offset is, on the attach WebSocket of a detached process, where its
	// output continues: the byte offset in its combined output of the
	// next output byte sent ("started", "dropped").
	Offset int64 `json:"offset,omitempty"`
	// Dropped is how many bytes of output before Offset fell out of the
	// guest's ring and will not be sent ("dropped").
	Dropped int64 `json:"dropped,omitempty"`
	// Exit is how the command ended ("exit").
	Exit *ExitStatus `json:"exit,omitempty"`
	// Error says why the session ended without an exit status ("error").
	Error *Error `json:"error,omitempty"`
}

// TtySize is a terminal's window size in character cells.
type TtySize struct {
	// Rows is the number of lines, 1–65535.
	Rows int `json:"rows"`
	// Cols is the number of columns, 1–65535.
	Cols int `json:"cols"`
}

// Validate checks both dimensions. Errors are 400 invalid_argument.
func (s *TtySize) Validate() error {
	if s.Rows < 1 || s.Rows > 65535 || s.Cols < 1 || s.Cols > 65535 {
		return Invalidf("terminal size %dx%d (rows x cols): both must be 1-65535", s.Rows, s.Cols)
	}
	return nil
}
