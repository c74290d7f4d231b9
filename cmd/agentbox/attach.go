package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

// Detach keys of `attach -it`, as docker attach's: Ctrl-P then Ctrl-Q.
const (
	detachKey1 = 0x10 // Ctrl-P
	detachKey2 = 0x11 // Ctrl-Q
)

const attachUsage = "agentbox attach [-i] [-t] [--offset N] SANDBOX PROCESS"

func attachCommand() *cli.Command {
	return &cli.Command{
		Name:      "attach",
		Usage:     "attach to a detached process: its output, your input (-i) and terminal (-t)",
		ArgsUsage: "SANDBOX PROCESS",
		Description: "Connects to the detached process PROCESS (an ID from `exec -d` or `ps`) until it ends or you\n" +
			"detach; the process runs on either way, and can be attached again (by several clients at once).\n" +
			"Its output is printed from byte --offset of its combined output (default: only new output).\n" +
			"With -i our stdin goes to its stdin. With -t (a process started with `exec -d -t`) our terminal\n" +
			"is in raw mode and its size follows ours; with -it, Ctrl-P Ctrl-Q detaches, as in docker attach.\n" +
			"Without -t, Ctrl-C detaches. `agentbox exec -d -t SB -- bash` then `agentbox attach -it SB PROC`\n" +
			"is a shell that survives the terminal, the connection and a daemon restart.\n\n" +
			"Exit status: the process's own if it ended while attached (128+N if killed by signal N); 0 after\n" +
			"a detach; 125 if agentbox failed (no such process, lost process).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "interactive", Aliases: []string{"i"}, Usage: "send our stdin to the process's stdin"},
			&cli.BoolFlag{Name: "tty", Aliases: []string{"t"}, Usage: "use our terminal: raw mode, size follows ours, Ctrl-P Ctrl-Q detaches"},
			&cli.Int64Flag{Name: "offset", Usage: "print its output from byte `N` of its combined output (default: new output only)"},
		},
		UseShortOptionHandling: true,
		OnUsageError:           usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args, err := exactArgs(c, 2, attachUsage)
			if err != nil {
				return err
			}
			var opts client.AttachOptions
			if c.IsSet("offset") {
				n := c.Int64("offset")
				if n < 0 {
					return fmt.Errorf("--offset %d: must be 0 or more", n)
				}
				opts.Offset = &n
			}
			return attach(ctx, c, cl, args[0], args[1], opts)
		}),
	}
}

// attach runs `agentbox attach`: with -t on our terminal (raw with -i,
// restored on every way out, SIGWINCH resizes, Ctrl-P Ctrl-Q detaches).
func attach(ctx context.Context, c *cli.Context, cl *client.Client, ref, proc string, opts client.AttachOptions) error {
	stderr := c.App.ErrWriter
	nl := "\n"
	var t *localTerminal
	var stdin io.Reader
	detach := make(chan struct{})
	if c.Bool("tty") {
		var err error
		if t, err = terminal(c); err != nil {
			return err
		}
	}
	if c.Bool("interactive") {
		stdin = c.App.Reader
		if t != nil {
			restore, err := t.rawMode()
			if err != nil {
				return err
			}
			defer restore()
			nl = "\r\n"
			var once sync.Once
			stdin = &detachKeys{r: t.in, detach: func() { once.Do(func() { close(detach) }) }}
		}
	}
	opts.OnDropped = func(offset, n int64) {
		fmt.Fprintf(stderr, "agentbox: %d bytes of output from offset %d are gone (the guest keeps the last 1 MiB); going on at offset %d%s", n, offset, offset+n, nl)
	}
	ctx, stopHup := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stopHup()
	// Without a terminal Ctrl-C detaches (as docker attach
	// --sig-proxy=false and kubectl attach): the interrupt ends the
	// session, and this says it was one. With -t Ctrl-C goes to the
	// process as a keystroke (raw mode) and never reaches us.
	intr := make(chan os.Signal, 1)
	if t == nil {
		signal.Notify(intr, syscall.SIGINT)
		defer signal.Stop(intr)
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)

	e, err := cl.AttachProcess(ctx, ref, proc, opts, stdin, c.App.Writer, stderr)
	if err != nil {
		if interruptedBy(ctx, t, intr) { // Ctrl-C while connecting: as a detach
			fmt.Fprintf(stderr, "%sagentbox: detached from process %s; it runs on (%s attaches again)%s", nl, proc, reattach(c, ref, proc), nl)
			return errDetachedByInterrupt
		}
		return err
	}
	if t != nil && !e.Tty() {
		e.Detach()
		return fmt.Errorf("process %s has no terminal (it was started without -t): attach without -t (-i still sends your stdin)", proc)
	}
	var size api.TtySize
	if t != nil {
		size = t.Size()
		_ = e.Resize(ctx, size) // ours from now on; a failure ends the session: Wait reports it
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-winch:
				if t != nil {
					t.followSize(ctx, e, &size)
				}
			case <-detach:
				e.Detach()
			case <-ctx.Done():
				e.Detach()
				return
			case <-e.Done():
				return
			}
		}
	}()
	st, err := e.Wait()
	<-done
	switch {
	case interruptedBy(ctx, t, intr):
		fmt.Fprintf(stderr, "%sagentbox: detached from process %s; it runs on (%s attaches again)%s", nl, proc, reattach(c, ref, proc), nl)
		return errDetachedByInterrupt
	case errors.Is(err, client.ErrDetached):
		fmt.Fprintf(stderr, "%sagentbox: detached from process %s; it runs on (%s attaches again)%s", nl, proc, reattach(c, ref, proc), nl)
		return ctx.Err() // nil, or the interrupt's (exit 128+N)
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return cutAttach(err, c, ref, proc)
	}
	return exitFor(guestStatus(st, 0))
}

// intrGrace bounds the wait for the SIGINT that may have ended an
// attach's context.
const intrGrace = 200 * time.Millisecond

// interruptedBy reports whether ctx ended because of a SIGINT (intr got
// it) on an attach without a terminal (t nil): a SIGINT reaches intr and
// the handler that ends ctx in one delivery, in either order.
func interruptedBy(ctx context.Context, t *localTerminal, intr <-chan os.Signal) bool {
	if ctx.Err() == nil || t != nil {
		return false
	}
	select {
	case <-intr:
		return true
	case <-time.After(intrGrace):
		return false
	}
}

// errDetachedByInterrupt ends an attach without a terminal that Ctrl-C
// detached: exit 0, its message printed already (an *exitError, so the
// interrupt is not reported as one).
var errDetachedByInterrupt = &exitError{code: 0}

// reattach is the command that attaches to proc of ref again as this one
// did.
func reattach(c *cli.Context, ref, proc string) string {
	flags := ""
	switch {
	case c.Bool("interactive") && c.Bool("tty"):
		flags = " -it"
	case c.Bool("interactive"):
		flags = " -i"
	case c.Bool("tty"):
		flags = " -t"
	}
	return fmt.Sprintf("agentbox attach%s %s %s", flags, ref, proc)
}

// cutAttach is the error of an attach session that ended without the
// process's end: when the daemon went away (the stream cut, or the daemon
// shutting down) the process runs on in the guest, and the message says
// how to attach again, as output -f says where to resume.
func cutAttach(err error, c *cli.Context, ref, proc string) error {
	if !resumable(err) { // output.go: refused or ended by the daemon (lost, paused)
		return err
	}
	return fmt.Errorf("%w\nthe process runs on in the guest: attach again once the daemon is back: %s", err, reattach(c, ref, proc))
}

// detachKeys passes r's bytes on until Ctrl-P Ctrl-Q, which calls detach
// and ends the stream (io.EOF). A Ctrl-P is held back until the next byte
// shows it is not the sequence; then both go on.
type detachKeys struct {
	r      io.Reader
	detach func()
	held   bool // a Ctrl-P was read and not passed on yet
	done   bool
}

// Read implements io.Reader.
func (d *detachKeys) Read(p []byte) (int, error) {
	if d.done {
		return 0, io.EOF
	}
	if len(p) < 2 {
		return 0, errors.New("detachKeys: read buffer under 2 bytes")
	}
	buf := make([]byte, len(p)-1) // room for a held Ctrl-P
	for {
		n, err := d.r.Read(buf)
		out := p[:0]
		for _, b := range buf[:n] {
			switch {
			case d.held && b == detachKey2:
				d.held, d.done = false, true
				d.detach()
				return len(out), nil
			case d.held && b == detachKey1:
				out = append(out, detachKey1) // the first one was not the sequence
			case d.held:
				d.held = false
				out = append(out, detachKey1, b)
			case b == detachKey1:
				d.held = true
			default:
				out = append(out, b)
			}
		}
		if len(out) > 0 || err != nil {
			return len(out), err
		}
	}
}
