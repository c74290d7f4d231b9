package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

func outputCommand() *cli.Command {
	return &cli.Command{
		Name:      "output",
		Usage:     "print a detached process's output",
		ArgsUsage: "SANDBOX PROCESS",
		Description: "Copies the stdout and stderr the detached process PROCESS (an ID from `exec -d` or `ps`) has\n" +
			"produced to ours, from byte --offset of its combined output (the guest keeps the last 1 MiB).\n" +
			"With -f it keeps following until the process ends and then exits with its exit status, like\n" +
			"`exec` would have; without -f it exits 0. The process runs on when the daemon restarts: a\n" +
			"stream that is cut says on stderr the offset to resume from with --offset, so no byte is lost\n" +
			"or shown twice (output older than the guest keeps is refused, saying the offset to use). A\n" +
			"follow rides across a pause of the sandbox; a process lost with the sandbox's stop is said so.\n\n" +
			"Exit status (-f): the process's own; 128+N if killed by signal N; 124 on timeout; 126/127 if it\n" +
			"could not be run; 125 if agentbox failed or the process was lost. 130/143 on Ctrl-C/SIGTERM (the\n" +
			"process keeps running).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "wait for more output until the process ends; exit with its status"},
			&cli.Int64Flag{Name: "offset", Usage: "start at byte `N` of the combined output"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args, err := exactArgs(c, 2, "agentbox output [-f] [--offset N] SANDBOX PROCESS")
			if err != nil {
				return err
			}
			if c.Int64("offset") < 0 {
				return fmt.Errorf("--offset %d: must be positive", c.Int64("offset"))
			}
			follow := c.Bool("follow")
			offset := &offsetCounter{}
			offset.n.Store(c.Int64("offset"))
			st, err := cl.ProcessOutput(ctx, args[0], args[1], c.Int64("offset"), follow,
				offset.writer(c.App.Writer), offset.writer(c.App.ErrWriter))
			if err != nil && ctx.Err() == nil && resumable(err) {
				return fmt.Errorf("%w\nresume from offset %d: agentbox output -f --offset %d %s %s", err, offset.n.Load(), offset.n.Load(), args[0], args[1])
			}
			if err != nil || !follow {
				return err
			}
			if st == nil {
				return fmt.Errorf("process %s was lost before it ended (daemon restart or guest death): its exit status is unknown", args[1])
			}
			return exitFor(guestStatus(*st, 0))
		}),
	}
}

// resumable reports whether an output stream that ended with err can be
// taken up again from its offset: the stream was cut (the connection, the
// daemon's restart or shutdown), not refused or ended by the daemon (no
// such process, a paused sandbox's 409 with its own hint, a process lost
// with its sandbox).
func resumable(err error) bool {
	var ae *api.Error
	return !errors.As(err, &ae) || ae.Code == api.CodeUnavailable
}

// offsetCounter tracks the offset a process output stream reached: the
// start offset plus every byte written to either stream (the daemon's
// events are contiguous in one offset space).
type offsetCounter struct{ n atomic.Int64 }

// writer returns w counting into the offset.
func (o *offsetCounter) writer(w io.Writer) io.Writer {
	return countWriter{w: w, n: &o.n}
}

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.n.Add(int64(k))
	return k, err
}
