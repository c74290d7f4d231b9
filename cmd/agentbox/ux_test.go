package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
)

// TestCLIOutputLostWithStop: a follow whose process was lost with its
// sandbox's stop says so and gives no offset to resume from (nothing is
// left to resume); neither does a refusal (a paused sandbox's 409).
func TestCLIOutputLostWithStop(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "create", "--image", "/img", "--name", "w1").check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "exec", "-d", "w1", "--", "out", "hello\n", "", "0").check(t, 0, "p1\n", "")
	d.mem.SetOutputError(api.Errorf(http.StatusConflict, api.CodeNotRunning, "process p1 was lost with the sandbox's stop (sandbox 000000abc001 stopped)"))
	d.cli(t, nil, "output", "-f", "w1", "p1").check(t, 125, "hello\n", "agentbox: process p1 was lost with the sandbox's stop (sandbox 000000abc001 stopped)\n")
	d.mem.SetOutputError(api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "the daemon is shutting down"))
	d.cli(t, nil, "output", "-f", "w1", "p1").check(t, 125, "hello\n",
		"agentbox: the daemon is shutting down\nresume from offset 6: agentbox output -f --offset 6 w1 p1\n")
}

// TestCLIPsPaused: ps of a paused sandbox notes that its running
// processes are as of the pause.
func TestCLIPsPaused(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "create", "--image", "/img", "--name", "w1").check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "exec", "-d", "w1", "--", "sleep").check(t, 0, "p1\n", "")
	<-d.mem.Sleeping()
	d.mem.SetState("000000abc001", api.StatePaused)
	d.cli(t, nil, "ps", "w1").check(t, 0, "ID  PID  STATE    EXIT  TTY  CMD\np1  200  running  -     -    sleep\n",
		"agentbox: sandbox w1 is paused: its processes are shown as they were when it was paused; they go on when it resumes (agentbox resume w1)\n")
	d.mem.SetState("000000abc001", api.StateRunning)
	d.cli(t, nil, "kill", "w1", "p1").check(t, 0, "", "")
}

// TestCLITimeoutNegative: a negative timeout is refused as one, saying
// what a timeout is, not as a flag after the arguments.
func TestCLITimeoutNegative(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "create", "--image", "/img", "--name", "w1").check(t, 0, "000000abc001\n", "")
	want := "agentbox: timeout -5m: a timeout is a positive duration from now, e.g. 30m (a TTL cannot be cleared: set a long one, up to 10 years)\n"
	d.cli(t, nil, "timeout", "w1", "-5m").check(t, 125, "", want)
	d.cli(t, nil, "timeout", "w1", "0s").check(t, 125, "", "agentbox: timeout 0s: a timeout is a positive duration from now, e.g. 30m (a TTL cannot be cleared: set a long one, up to 10 years)\n")
}

// TestCLIWatchRelative: a relative watch path is refused saying what to
// give.
func TestCLIWatchRelative(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "create", "--image", "/img", "--name", "w1").check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "watch", "w1", "work").check(t, 125, "", "agentbox: path work must be absolute (e.g. /work)\n")
}

// TestCLIAttachInterrupt: Ctrl-C (SIGINT) on an attach without a
// terminal detaches, as documented: exit 0, the process runs on, and how
// to attach again.
func TestCLIAttachInterrupt(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "create", "--image", "/img", "--name", "w1").check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "exec", "-d", "w1", "--", "sleep").check(t, 0, "p1\n", "")
	<-d.mem.Sleeping()
	attached := make(chan struct{})
	d.mem.NotifyAttach(attached)
	go func() {
		<-attached
		syscall.Kill(syscall.Getpid(), syscall.SIGINT)
	}()
	r := d.cli(t, nil, "attach", "w1", "p1")
	r.check(t, 0, "", "\nagentbox: detached from process p1; it runs on (agentbox attach w1 p1 attaches again)\n")
	kills := strings.Join(d.mem.Kills(), ",")
	if kills != "" {
		t.Errorf("kills %q after the detach, want none", kills)
	}
}

// TestCutAttach: an attach cut by the daemon's going away says that the
// process runs on and how to attach again (with the flags used); one
// the daemon refused or ended says only why.
func TestCutAttach(t *testing.T) {
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	fs.Bool("interactive", true, "")
	fs.Bool("tty", true, "")
	c := cli.NewContext(newApp(), fs, nil)
	cut := fmt.Errorf("daemon closed the exec stream: %w", io.ErrUnexpectedEOF)
	want := "daemon closed the exec stream: unexpected EOF\nthe process runs on in the guest: attach again once the daemon is back: agentbox attach -it w1 p1"
	if got := cutAttach(cut, c, "w1", "p1"); got.Error() != want || !errors.Is(got, io.ErrUnexpectedEOF) {
		t.Errorf("cut: %q, want %q", got, want)
	}
	lost := api.Errorf(http.StatusConflict, api.CodeNotRunning, "process p1 was lost with the sandbox's stop")
	if got := cutAttach(lost, c, "w1", "p1"); got != error(lost) {
		t.Errorf("lost: %q, want it as it is", got)
	}
}
