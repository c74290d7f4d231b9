package main

import (
	"fmt"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
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

// statusCode maps a guest command's ExitStatus to agentbox's exit status and
// a message to print (empty when the command simply exited).
func statusCode(st agentproto.ExitStatus, timeout string) (int, string) {
	switch {
	case st.TimedOut:
		return ExitTimeout, fmt.Sprintf("command timed out after %s and was killed", timeout)
	case st.ErrorKind == agentproto.ExecNotFound:
		return ExitNotFound, st.Error
	case st.ErrorKind != "":
		return ExitCannotRun, st.Error
	case st.Signal > 0:
		return ExitSignalBase + st.Signal, ""
	}
	return st.Code, ""
}

// apiStatusCode maps a daemon's ExitStatus to agentbox's exit status and a
// message to print (empty when the command simply exited). The daemon
// already computes the shell-style code; timeout is the --timeout given
// (0 when the sandbox's default command timeout applied).
func apiStatusCode(st api.ExitStatus, timeout time.Duration) (int, string) {
	switch {
	case st.TimedOut:
		after := "the sandbox's command timeout"
		if timeout > 0 {
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
