package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

// defaultTtySize is the terminal size of a command started with -t when
// ours cannot be measured (a detached command started from a script).
var defaultTtySize = api.TtySize{Rows: 24, Cols: 80}

// localTerminal is the terminal `exec -t` and `run -t` run on: our stdin
// and, for its size, stdout if that is a terminal too.
type localTerminal struct {
	in   *os.File
	size int // fd whose window size is the command's
}

// terminal returns our terminal, or an error saying -t needs one.
func terminal(c *cli.Context) (*localTerminal, error) {
	in, ok := c.App.Reader.(*os.File)
	if !ok || !isTerminal(in) {
		return nil, errors.New("-t needs a terminal on stdin: run it from one, or drop -t to pipe stdin (-i)")
	}
	t := &localTerminal{in: in, size: int(in.Fd())}
	if out, ok := c.App.Writer.(*os.File); ok && isTerminal(out) {
		t.size = int(out.Fd())
	}
	return t, nil
}

// Size is the terminal's window size, defaultTtySize when unknown.
func (t *localTerminal) Size() api.TtySize {
	cols, rows, err := term.GetSize(t.size)
	if err != nil || rows < 1 || cols < 1 {
		return defaultTtySize
	}
	return api.TtySize{Rows: rows, Cols: cols}
}

// rawMode puts the terminal in raw mode (keys, Ctrl-C included, are read
// as typed) and returns the function that restores it.
func (t *localTerminal) rawMode() (restore func(), err error) {
	state, err := term.MakeRaw(int(t.in.Fd()))
	if err != nil {
		return nil, fmt.Errorf("put the terminal in raw mode: %w", err)
	}
	return func() { _ = term.Restore(int(t.in.Fd()), state) }, nil
}

// followSize gives e our window size when it is no longer *size (after a
// SIGWINCH) and records it; a failure ends e's session, which e.Wait
// reports.
func (t *localTerminal) followSize(ctx context.Context, e *client.InteractiveExec, size *api.TtySize) {
	if s := t.Size(); s != *size {
		*size = s
		_ = e.Resize(ctx, s)
	}
}

// ttyExec runs req on a terminal in sandbox ref through the interactive
// exec, with our terminal: with -i in raw mode (keys, Ctrl-C included, go
// to the guest's terminal as they are typed) and restored on every way
// out; our window size follows SIGWINCH. It returns the CLI's exit status
// for the command.
func ttyExec(ctx context.Context, c *cli.Context, cl *client.Client, ref string, req api.ExecRequest) error {
	t, err := terminal(c)
	if err != nil {
		return err
	}
	size := t.Size()
	req.Tty = &size
	var stdin io.Reader
	if c.Bool("interactive") {
		restore, err := t.rawMode()
		if err != nil {
			return err
		}
		// Restored on return, which every way out takes: the command's
		// exit, an error, SIGINT/SIGTERM/SIGHUP (they end ctx; in raw
		// mode Ctrl-C is a byte, not a signal).
		defer restore()
		stdin = t.in
	}
	ctx, stopHup := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stopHup()

	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)

	e, err := cl.StartInteractive(ctx, ref, req, stdin, c.App.Writer, c.App.ErrWriter)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-winch:
				t.followSize(ctx, e, &size)
			case <-ctx.Done():
				return
			case <-e.Done():
				return
			}
		}
	}()
	st, err := e.Wait()
	<-done
	if ctx.Err() != nil {
		return interrupted(ctx, err)
	}
	if err != nil {
		return err
	}
	return exitFor(guestStatus(st, time.Duration(req.TimeoutMs)*time.Millisecond))
}
