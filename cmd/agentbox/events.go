package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

func eventsCommand() *cli.Command {
	return &cli.Command{
		Name:  "events",
		Usage: "print sandbox events as they happen",
		Description: "Follows the daemon's sandbox events (created, state changes with their reasons, removed) and\n" +
			"prints one line each until interrupted: TIME TYPE SANDBOX [NAME] [STATE] [REASON]; --json\n" +
			"prints the API's objects, one per line.\n\n" +
			"Exit status: 130/143 when interrupted; 125 if the daemon ends the stream or fails.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per line"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			if _, err := exactArgs(c, 0, "agentbox events [--json]"); err != nil {
				return err
			}
			w := c.App.Writer
			enc := json.NewEncoder(w)
			err := cl.Events(ctx, func(ev api.Event) error {
				if c.Bool("json") {
					return enc.Encode(ev)
				}
				_, err := fmt.Fprintln(w, eventLine(ev))
				return err
			})
			switch {
			case ctx.Err() != nil:
				return errStopped
			case err == nil:
				return fmt.Errorf("the daemon ended the event stream (is it shutting down?)")
			}
			return err
		}),
	}
}

// eventLine renders one event for `agentbox events`.
func eventLine(ev api.Event) string {
	s := ev.Time.Local().Format(time.RFC3339) + " " + ev.Type + " " + ev.Sandbox
	for _, f := range []string{ev.Name, ev.State} {
		if f != "" {
			s += " " + f
		}
	}
	if ev.Reason != "" {
		s += fmt.Sprintf(" (%s)", ev.Reason)
	}
	return s
}
