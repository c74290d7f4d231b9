package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

func watchCommand() *cli.Command {
	return &cli.Command{
		Name:      "watch",
		Usage:     "print the changes below a path in a sandbox as they happen",
		ArgsUsage: "SANDBOX PATH",
		Description: "Watches PATH (absolute; a directory, or a file) in the sandbox with inotify and prints one line\n" +
			"per change until interrupted: CREATE, WRITE, REMOVE, CHMOD (any metadata change) followed by the\n" +
			"path, RENAME OLD -> NEW (OLD alone when it left the watched tree), OVERFLOW PATH when the guest's\n" +
			"event queue overflowed and changes were lost (rescan if it matters). A burst of writes to a\n" +
			"file is one or more WRITE lines. --recursive follows the directories below PATH, new ones\n" +
			"included (what a new directory already holds is reported as CREATE). \"watching PATH\" goes to\n" +
			"stderr once the watch is in place: every later change is printed. --json prints the API's\n" +
			"events (with the entry's type, size and mode), one per line.\n\n" +
			"Exit status: 0 when PATH itself was removed or moved; 130/143 when interrupted; 125 on an\n" +
			"error (no such path, the sandbox stopped).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"r"}, Usage: "watch the directories below PATH too"},
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args, err := exactArgs(c, 2, "agentbox watch [--recursive] [--json] SANDBOX PATH")
			if err != nil {
				return err
			}
			if p := args[1]; p != "" && !strings.HasPrefix(p, "/") {
				return fmt.Errorf("path %s must be absolute (e.g. %s)", quoteWord(p), quoteWord(path.Join("/", p)))
			}
			w := c.App.Writer
			enc := json.NewEncoder(w)
			ready := func() {
				how := ""
				if c.Bool("recursive") {
					how = " (recursive)"
				}
				fmt.Fprintf(c.App.ErrWriter, "watching %s%s\n", args[1], how)
			}
			err = cl.Watch(ctx, args[0], args[1], c.Bool("recursive"), ready, func(ev api.WatchEvent) error {
				if c.Bool("json") {
					return enc.Encode(ev)
				}
				_, err := fmt.Fprintln(w, watchLine(ev))
				return err
			})
			switch {
			case ctx.Err() != nil:
				return errStopped
			case err == nil:
				fmt.Fprintf(c.App.ErrWriter, "%s is gone: the watch ended\n", args[1])
			}
			return err
		}),
	}
}

// watchLine renders one event for `agentbox watch`: "OP PATH", "RENAME
// OLD -> NEW". Paths are quoted as a shell would need them (quoteWord),
// so each change stays one line.
func watchLine(ev api.WatchEvent) string {
	s := ev.Op + " " + quoteWord(ev.Path)
	if ev.To != "" {
		s += " -> " + quoteWord(ev.To)
	}
	return s
}
