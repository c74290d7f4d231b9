package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/client"
)

func auditCommand() *cli.Command {
	return &cli.Command{
		Name:      "audit",
		Usage:     "print the audit log: every action taken on a sandbox, or on all",
		ArgsUsage: "[SANDBOX]",
		Description: "Prints the daemon's audit entries of SANDBOX (also after it was removed, by ID) or of all\n" +
			"sandboxes, oldest first, one line each: time, sandbox, caller, action, its arguments, exit code,\n" +
			"duration and error. --json prints the raw entries (JSON lines); --replay renders the session as\n" +
			"a readable timeline (commands, their output heads, files moved; a command run on a terminal\n" +
			"with `exec -t` shows its screen text and what was typed). --play EXEC plays such a terminal\n" +
			"session back in this terminal with its timing (pauses capped at 2s; --speed 2 plays twice as\n" +
			"fast, --speed 0 at once), escape sequences included.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "raw entries, one JSON object per line"},
			&cli.BoolFlag{Name: "replay", Usage: "render the session as a readable timeline"},
			&cli.StringFlag{Name: "play", Usage: "play the terminal session of exec `ID` of SANDBOX back, with its timing"},
			&cli.Float64Flag{Name: "speed", Value: 1, Usage: "with --play: play `N` times as fast (0: at once)"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args := c.Args().Slice()
			if err := noFlagsAfter(args, "agentbox audit [--json|--replay] [SANDBOX]"); err != nil {
				return err
			}
			if len(args) > 1 {
				return fmt.Errorf("want at most one SANDBOX, got %d: usage: agentbox audit [--json|--replay] [SANDBOX]", len(args))
			}
			if c.Bool("json") && c.Bool("replay") {
				return fmt.Errorf("--json and --replay exclude each other")
			}
			ref := c.Args().First()
			w := c.App.Writer
			if id := c.String("play"); id != "" {
				return playSession(ctx, c, cl, ref, id)
			}
			switch {
			case c.Bool("json"):
				enc := json.NewEncoder(w)
				return cl.Audit(ctx, ref, func(e audit.Entry) error { return enc.Encode(e) })
			case c.Bool("replay"):
				var entries []audit.Entry
				if err := cl.Audit(ctx, ref, func(e audit.Entry) error {
					entries = append(entries, e)
					return nil
				}); err != nil {
					return err
				}
				return writeReplay(w, entries, replayOptions{})
			}
			return cl.Audit(ctx, ref, func(e audit.Entry) error {
				_, err := fmt.Fprintln(w, auditLine(e))
				return err
			})
		}),
	}
}

// auditLine renders one entry compactly:
// TIME SANDBOX CALLER ACTION [ARGS] [exec=ID] [exit=N] DURATION [in=B] [out=B] [error: CODE: MESSAGE].
func auditLine(e audit.Entry) string {
	var b strings.Builder
	sb := e.Sandbox
	if sb == "" {
		sb = "-"
	}
	fmt.Fprintf(&b, "%s %s %s %s", e.Time.Local().Format("2006-01-02T15:04:05.000Z07:00"), sb, e.Caller, e.Action)
	if a := auditArgs(e.Args); a != "" {
		b.WriteString(" " + a)
	}
	if e.ExitCode != nil {
		fmt.Fprintf(&b, " exit=%d", *e.ExitCode)
	}
	fmt.Fprintf(&b, " %s", (time.Duration(e.DurationMs) * time.Millisecond).String())
	if e.BytesIn > 0 {
		fmt.Fprintf(&b, " in=%dB", e.BytesIn)
	}
	if e.BytesOut > 0 {
		fmt.Fprintf(&b, " out=%dB", e.BytesOut)
	}
	if e.Error != "" {
		fmt.Fprintf(&b, " error: %s: %s", e.Error, e.ErrorMessage)
	}
	return b.String()
}

// auditArgs renders an entry's arguments: the command line of an exec
// first (shell-quoted), then the others as sorted key=JSON pairs.
func auditArgs(args map[string]any) string {
	var parts []string
	var argv []string
	switch cmd := args["cmd"].(type) {
	case []string:
		argv = cmd
	case []any:
		for _, a := range cmd {
			argv = append(argv, fmt.Sprint(a))
		}
	}
	if argv != nil {
		parts = append(parts, "`"+shellJoin(argv)+"`")
	}
	keys := make([]string, 0, len(args))
	for k := range args {
		if k != "cmd" || argv == nil {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := json.Marshal(args[k])
		if err != nil {
			v = []byte(fmt.Sprint(args[k]))
		}
		parts = append(parts, k+"="+string(v))
	}
	return strings.Join(parts, " ")
}

// playSession is `agentbox audit --play EXEC SANDBOX`.
func playSession(ctx context.Context, c *cli.Context, cl *client.Client, ref, id string) error {
	if ref == "" {
		return fmt.Errorf("--play %s needs the SANDBOX: usage: agentbox audit --play EXEC SANDBOX", id)
	}
	if c.Bool("json") || c.Bool("replay") {
		return fmt.Errorf("--play excludes --json and --replay")
	}
	if c.Float64("speed") < 0 {
		return fmt.Errorf("--speed %g: must not be negative", c.Float64("speed"))
	}
	var found *audit.Entry
	if err := cl.Audit(ctx, ref, func(e audit.Entry) error {
		if e.ExecID == id && e.Action == audit.ActionExec {
			found = &e
		}
		return nil
	}); err != nil {
		return err
	}
	switch {
	case found == nil:
		return fmt.Errorf("no exec %s in the audit of %s: see `agentbox audit --replay %s`", id, ref, ref)
	case found.Tty == nil:
		return fmt.Errorf("exec %s of %s did not run on a terminal: only `exec -t` sessions are recorded for --play (see `agentbox audit --replay %s`)", id, ref, ref)
	}
	return playTty(ctx, c.App.Writer, found.Tty, c.Float64("speed"))
}
