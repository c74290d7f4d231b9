package sandbox

import "time"

// This file makes the idle timeout's action one step with the idleness
// it acts on: the check that nothing runs (no command or file operation
// in flight, none for the idle timeout) and the action (remove, stop,
// pause, pause to disk) exclude commands and file operations beginning
// in between, so a command is never paused or cut mid-run for being
// idle: it either began before (the sandbox is not idle) or begins after
// the action, on the sandbox as the action left it.

// idleGate is a sandbox's idle action (RunIfIdle) and what waits for it
// (KeepAwake; BeginExec and Busy in account.go). It is a part of the Sandbox
// it points to (linked).
type idleGate struct{ *Sandbox }

// RunIfIdle runs action, the idle timeout's action, if the sandbox is
// idle at now (running, no command or file operation in flight, none for
// IdleTimeoutSeconds: what makes Expired say ExpiredIdle), and reports
// whether it ran, with action's error. The check and action are atomic
// for commands and file operations: BeginExec, Busy and KeepAwake wait
// while action runs. action must not begin commands or file operations
// on the sandbox (they would wait for it); a second RunIfIdle during one
// does not run.
func (sb *idleGate) RunIfIdle(now time.Time, action func() error) (ran bool, err error) {
	state := sb.State()
	acct := sb.account()
	acct.mu.Lock()
	if acct.idling != nil || !acct.idleLocked(now, state) {
		acct.mu.Unlock()
		return false, nil
	}
	done := make(chan struct{})
	acct.idling = done
	acct.mu.Unlock()
	defer func() {
		acct.mu.Lock()
		acct.idling = nil
		acct.mu.Unlock()
		close(done)
	}()
	return true, action()
}

// KeepAwake records activity now, as Touch does, after waiting for an
// idle action under way (RunIfIdle) to end. A caller that is about to
// use the sandbox and resumes it if paused (the ?resume=true of an exec,
// file or process call) calls it before it looks at the state: it then
// sees the sandbox as an idle action left it, and the idle clock starts
// again, so no idle action begins between its look and its use.
func (sb *idleGate) KeepAwake() {
	acct := sb.account()
	acct.mu.Lock()
	acct.waitIdleAction()
	acct.a.LastActivity = time.Now().UTC()
	acct.mu.Unlock()
}

// waitIdleAction waits, with a.mu held (released while it waits), until
// no idle action runs, and reports whether it waited for one.
func (a *execAccount) waitIdleAction() bool {
	waited := false
	for a.idling != nil {
		ch := a.idling
		a.mu.Unlock()
		<-ch
		a.mu.Lock()
		waited = true
	}
	return waited
}

// idleLocked reports whether a sandbox in state with this accounting is
// idle at now; call with a.mu held. Only a running sandbox with an idle
// timeout can be, and not while a command or file operation is in
// flight.
func (a *execAccount) idleLocked(now time.Time, state State) bool {
	lim, last := a.a.Limits, a.a.LastActivity
	return lim.IdleTimeoutSeconds > 0 && a.busy == 0 && state == StateRunning && !last.IsZero() &&
		now.Sub(last) >= time.Duration(lim.IdleTimeoutSeconds)*time.Second
}
