package api

// Attaching to a detached process: GET
// /v1/sandboxes/{id}/processes/{pid}/ws?offset=N upgrades to a WebSocket
// with the messages of the interactive exec (execws.go), for a process
// that already runs (started with POST .../processes; with "tty" it is a
// terminal). The differences:
//
//   - The client sends no "start": the server's first message is
//     "started" with ExecID (the process id), Pid, Tty (the terminal's
//     current size; absent without a terminal) and Offset (where the
//     output it sends begins: ?offset=, or the current end of the output
//     when the parameter is absent, so only new output comes).
//   - Output comes from that offset on and follows the process. When
//     output the client would get fell out of the guest's ring (an old
//     offset, or a client that read too slowly), the server says so with
//     "dropped" (Dropped bytes are gone, output goes on at Offset) and
//     continues; nothing is skipped silently.
//   - "stdin" messages go to the process's stdin (its terminal's input);
//     "stdin_close" ends this client's input only (the process's stdin
//     stays open: POST .../stdin?close=true closes it). "resize" and
//     "signal" act on the process as on an exec.
//   - The session ends with "exit" (or "error" for a lost process) when
//     the process ends. Closing the connection, or a protocol error of the
//     client, DETACHES: the process runs on, and another client may attach
//     (several may at once: each gets the output, their input is
//     interleaved message by message).

// ExecWSDropped is a server message of the attach WebSocket: Dropped
// bytes of output were lost before Offset, where the output goes on.
const ExecWSDropped = "dropped"
