package envd

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"syscall"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process"
)

// followRetries is how often follow asks again for the output of a
// process that still runs after the daemon ended its output stream
// without the exit status (it does while shutting down).
const followRetries = 3

// follow sends the events of process p of sandbox sb through send:
// start{pid}, its output from offset on (the API's offset in its combined
// output) as data events, then end; keepalive events in between at the
// interval h asks for (keepaliveHeader). It returns once end was sent,
// or with the error that stopped it (the context's when the client went
// away or the request's deadline passed: the process runs on).
func (s *processService) follow(ctx context.Context, h http.Header, sb string, p api.Process, offset int64, send func(*process.ProcessEvent) error) error {
	var mu sync.Mutex // connect.ServerStream.Send is not safe for concurrent use
	sendLocked := func(ev *process.ProcessEvent) error {
		mu.Lock()
		defer mu.Unlock()
		return send(ev)
	}
	if err := sendLocked(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(p.Pid)}}}); err != nil {
		return err
	}
	stop := keepalive(ctx, keepaliveInterval(h), nil, func() error {
		return sendLocked(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}})
	})
	defer stop() // no send after the handler returned

	stdout := &dataWriter{send: sendLocked, offset: &offset, wrap: func(b []byte) *process.ProcessEvent_DataEvent {
		return &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: b}}
	}}
	if p.Tty != nil {
		stdout.wrap = func(b []byte) *process.ProcessEvent_DataEvent {
			return &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Pty{Pty: b}}
		}
	}
	stderr := &dataWriter{send: sendLocked, offset: &offset, wrap: func(b []byte) *process.ProcessEvent_DataEvent {
		return &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stderr{Stderr: b}}
	}}
	for tries := 0; ; tries++ {
		st, err := s.c.ProcessOutput(ctx, sb, p.ID, offset, true, stdout, stderr)
		if err != nil {
			return connectError(err)
		}
		if st != nil {
			return sendLocked(endEvent(*st))
		}
		cur, err := s.c.GetProcess(ctx, sb, p.ID)
		if err != nil {
			return connectError(err)
		}
		switch {
		case cur.State == api.ProcessLost:
			msg := "the process's end could not be learnt (the guest died or the sandbox stopped)"
			return sendLocked(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{ExitCode: -1, Status: "lost", Error: &msg}}})
		case tries == followRetries:
			return errorf(connect.CodeUnavailable, "the sandbox service ended the output of process %d %d times without its end; connect again", p.Pid, tries+1)
		}
	}
}

// dataWriter sends what is written to it as data events and advances the
// offset of the output sent.
type dataWriter struct {
	send   func(*process.ProcessEvent) error
	offset *int64
	wrap   func([]byte) *process.ProcessEvent_DataEvent
}

// Write implements io.Writer.
func (w *dataWriter) Write(b []byte) (int, error) {
	if err := w.send(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: w.wrap(b)}}); err != nil {
		return 0, err
	}
	*w.offset += int64(len(b))
	return len(b), nil
}

// endEvent is the end event of a process that ended with st, as envd
// describes one (Go's os.ProcessState): exited with its exit code and
// "exit status N", or killed with exit code -1 and "signal: NAME"; error
// repeats the status when the code is not 0 (the SDK's CommandExitError
// message), or says why the command did not start.
func endEvent(st api.ExitStatus) *process.ProcessEvent {
	e := &process.ProcessEvent_EndEvent{}
	var msg string
	switch {
	case st.Error != "":
		e.ExitCode, e.Status, msg = int32(st.ExitCode), "error", st.Error
	case st.Signal != 0:
		e.ExitCode, e.Status = -1, "signal: "+syscall.Signal(st.Signal).String()
		msg = e.Status
		if st.TimedOut {
			msg += " (its timeout expired)"
		}
	default:
		e.ExitCode, e.Exited, e.Status = int32(st.ExitCode), true, fmt.Sprintf("exit status %d", st.ExitCode)
		if st.ExitCode != 0 {
			msg = e.Status
		}
	}
	if msg != "" {
		e.Error = &msg
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_End{End: e}}
}
