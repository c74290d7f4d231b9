package main

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Exit statuses of `agentbox run`, following `docker run` and timeout(1).
const (
	// ExitTimeout: the command ran past --timeout and was killed (timeout(1)).
	ExitTimeout = 124
	// ExitAgentboxFailed: agentbox itself failed (docker run's 125).
	ExitAgentboxFailed = 125
	// ExitCannotRun: the command exists but cannot be run (docker's 126).
	ExitCannotRun = 126
	// ExitNotFound: the command was not found in the guest (docker's 127).
	ExitNotFound = 127
	// ExitSignalBase: a command killed by signal N exits 128+N.
	ExitSignalBase = 128
)

// exitError carries an exit status out of a command action, with an optional
// message for stderr.
type exitError struct {
	code int
	msg  string
}

// Error implements the error interface.
func (e *exitError) Error() string { return fmt.Sprintf("exit status %d: %s", e.code, e.msg) }

// exitStatuses is THE map from an error's errdefs category to agentbox's
// exit status, for errors of agentbox itself (a daemon's answers come back
// as *api.Error, which matches its category): every category is docker
// run's 125 today, and so is an uncategorised error. A guest command's
// own status travels as an *exitError instead (guestStatus).
var exitStatuses = map[*errdefs.Error]int{
	errdefs.ErrNotFound:           ExitAgentboxFailed,
	errdefs.ErrAlreadyExists:      ExitAgentboxFailed,
	errdefs.ErrConflict:           ExitAgentboxFailed,
	errdefs.ErrInvalidArgument:    ExitAgentboxFailed,
	errdefs.ErrFailedPrecondition: ExitAgentboxFailed,
	errdefs.ErrResourceExhausted:  ExitAgentboxFailed,
	errdefs.ErrUnavailable:        ExitAgentboxFailed,
	errdefs.ErrCanceled:           ExitAgentboxFailed,
	errdefs.ErrDeadlineExceeded:   ExitAgentboxFailed,
	errdefs.ErrPermissionDenied:   ExitAgentboxFailed,
	errdefs.ErrUnauthenticated:    ExitAgentboxFailed,
	errdefs.ErrNotImplemented:     ExitAgentboxFailed,
	errdefs.ErrInternal:           ExitAgentboxFailed,
}

// exitStatus maps err to the process exit status and the message to print
// ("" for none): an *exitError carries a guest command's status (or a
// signal's 128+N) and its own message; any other error is agentbox's own
// failure, by its category (exitStatuses).
func exitStatus(err error) (int, string) {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code, ee.msg
	}
	code, ok := exitStatuses[errdefs.Category(err)]
	if !ok { // uncategorised
		code = ExitAgentboxFailed
	}
	return code, err.Error()
}

// statusCode maps a guest command's ExitStatus from the guest agent (run
// --local) to agentbox's exit status and a message to print: the agent's
// status in the daemon's shell form, through guestStatus.
func statusCode(st agentproto.ExitStatus, timeout time.Duration) (int, string) {
	as := api.ExitStatus{ExitCode: st.ShellCode(), Signal: st.Signal, TimedOut: st.TimedOut, Error: st.Error}
	if st.ErrorKind == "" {
		as.Error = ""
	}
	return guestStatus(as, timeout)
}

// guestStatus maps a guest command's ExitStatus (the daemon's shell-style
// code) to agentbox's exit status and a message to print (empty when the
// command simply exited): 124 after a timeout, the shell's 126/127 for a
// command that could not start (125 if no code came with it), 128+N after
// signal N, else the command's own code. timeout is the --timeout given
// (0 when the sandbox's default command timeout applied); the timeout
// the daemon says applied (st.TimeoutMs: a policy may have capped it)
// wins.
func guestStatus(st api.ExitStatus, timeout time.Duration) (int, string) {
	switch {
	case st.TimedOut:
		after := "the sandbox's command timeout"
		switch {
		case st.TimeoutMs > 0:
			after = (time.Duration(st.TimeoutMs) * time.Millisecond).String()
		case timeout > 0:
			after = timeout.String()
		}
		return ExitTimeout, fmt.Sprintf("command timed out after %s and was killed", after)
	case st.Error != "":
		if st.ExitCode == 0 {
			return ExitAgentboxFailed, st.Error
		}
		return st.ExitCode, st.Error
	case st.Signal > 0:
		return ExitSignalBase + st.Signal, ""
	}
	return st.ExitCode, ""
}

// exitFor turns an exit status into the action's result: nil for 0 without
// a message, else an *exitError.
func exitFor(code int, msg string) error {
	if code == 0 && msg == "" {
		return nil
	}
	return &exitError{code: code, msg: msg}
}

// signalExit is the result of an action interrupted by signal sig:
// agentbox exits 128+sig (ExitSignalBase), printing msg ("" for nothing).
func signalExit(sig syscall.Signal, msg string) error {
	return &exitError{code: ExitSignalBase + int(sig), msg: msg}
}
