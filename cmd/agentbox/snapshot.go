package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

func snapshotCommand() *cli.Command {
	return &cli.Command{
		Name:  "snapshot",
		Usage: "save, list and remove checkpoints of running sandboxes",
		Description: "A snapshot holds a running sandbox's whole machine — memory, devices and disk — inside its\n" +
			"qcow2 overlay (a QEMU internal snapshot). `agentbox restore NAME` starts a NEW sandbox that\n" +
			"continues from that instant; restoring twice gives two independent forks. Snapshots outlive\n" +
			"the sandbox they were taken of (its overlay is kept until its last snapshot is removed) and\n" +
			"daemon restarts. A restore needs the exact image the snapshot was taken on.",
		Subcommands: []*cli.Command{
			{
				Name:      "save",
				Usage:     "checkpoint a running sandbox; it keeps running",
				ArgsUsage: "SANDBOX NAME",
				Description: "Saves SANDBOX's memory, device state and disk as snapshot NAME (unique; letters, digits, '_',\n" +
					"'.', '-'; not 12 hex digits) and prints NAME. The sandbox keeps running; its vCPUs pause\n" +
					"briefly while the last dirty memory is written.\n\n" +
					"Exit status: 0; 125 if it failed: the sandbox is not running, NAME is taken, or the host's\n" +
					"disk is full (the sandbox keeps running and nothing of the snapshot is kept).",
				OnUsageError: usageError,
				Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					args, err := exactArgs(c, 2, "agentbox snapshot save SANDBOX NAME")
					if err != nil {
						return err
					}
					s, err := cl.SaveSnapshot(ctx, args[0], args[1])
					if err != nil {
						return err
					}
					fmt.Fprintln(c.App.Writer, s.Name)
					return nil
				}),
			},
			{
				Name:      "ls",
				Aliases:   []string{"list"},
				Usage:     "list snapshots",
				ArgsUsage: "[SANDBOX]",
				Description: "Prints one line per snapshot, oldest first: NAME, ID, SANDBOX (the one it was taken of;\n" +
					"\"NAME (removed)\" once it is gone — the snapshot still restores), IMAGE, CPUS, MEMORY, VMSTATE (saved memory and devices), DISK (what it costs on\n" +
					"the host's disk), SAVE (how long the save took), AGE. With SANDBOX only its snapshots (a\n" +
					"removed sandbox by its ID). -q prints only names; --json the API's objects.",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only the names"},
					&cli.BoolFlag{Name: "json", Usage: "print a JSON array of the snapshots"},
				},
				OnUsageError: usageError,
				Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					usage := "agentbox snapshot ls [-q] [--json] [SANDBOX]"
					if err := noFlagsAfter(c.Args().Slice(), usage); err != nil {
						return err
					}
					if c.Args().Len() > 1 {
						return fmt.Errorf("want at most 1 argument, got %d: usage: %s", c.Args().Len(), usage)
					}
					list, err := cl.ListSnapshots(ctx, c.Args().First())
					if err != nil {
						return err
					}
					return writeList(c, list, func(s api.Snapshot) string { return s.Name }, writeSnapshotTable)
				}),
			},
			{
				Name:      "rm",
				Usage:     "remove snapshots",
				ArgsUsage: "NAME...",
				Description: "Removes each snapshot NAME and prints it. The file of a removed sandbox's snapshots goes\n" +
					"with its last snapshot.\n\n" +
					"Exit status: 0; 125 if any could not be removed (the others still are).",
				OnUsageError: usageError,
				Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					names, err := someArgs(c, "agentbox snapshot rm NAME...")
					if err != nil {
						return err
					}
					var errs []error
					for _, n := range names {
						if err := cl.DeleteSnapshot(ctx, n); err != nil {
							if ctx.Err() != nil {
								return err
							}
							errs = append(errs, err)
							continue
						}
						fmt.Fprintln(c.App.Writer, n)
					}
					return joinRefErrors(c, errs)
				}),
			},
		},
	}
}

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "start a new sandbox from a snapshot and print its ID",
		ArgsUsage: "SNAPSHOT",
		Description: "Starts a NEW sandbox that continues from snapshot SNAPSHOT: same memory (processes the\n" +
			"guest started go on; commands run through exec at the snapshot end, their streams are gone),\n" +
			"same disk, same machine shape and network policy; its own ID, hostname, machine id and network\n" +
			"(tap, addresses; the guest NIC keeps the source's MAC, part of its saved device state), and its\n" +
			"clock set to the host's. The source sandbox, if it still runs, is paused for the copy of its disk.\n" +
			"Restoring one snapshot again gives another independent sandbox; --count N restores N at once,\n" +
			"concurrently, named NAME-1 … NAME-N, each with its own identity and fresh randomness (all or\n" +
			"nothing: if one fails, the others are removed). Every restored guest's random number generator\n" +
			"is reseeded from the host.\n\n" +
			"Lifetime limits (--ttl, --idle-timeout, --exec-timeout, --max-execs) start from the snapshot's\n" +
			"sandbox; these flags override them. Resources (--cpus, --memory, --disk, --cpu-quota, I/O and\n" +
			"pids limits) and the network policy cannot be changed by a restore: they are the snapshot's,\n" +
			"because the restored machine must have exactly the shape its memory was saved with (create a\n" +
			"new sandbox for another shape). Only the ID is printed on stdout (one per line with --count).\n\n" +
			"Exit status: 0 once it runs; 125 if it could not be restored (no such snapshot, name taken,\n" +
			"the image changed since the snapshot, its file is gone or damaged, capacity, disk full).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "name", Usage: "a unique `NAME` for the new sandbox"},
			&cli.IntFlag{Name: "count", Value: 1, Usage: "restore `N` sandboxes concurrently, named NAME-1 … NAME-N (at most 64; 1: a single restore, named NAME)"},
			&cli.StringSliceFlag{Name: "label", Aliases: []string{"l"}, Usage: "attach label `KEY=VALUE` (repeatable)"},
			&cli.DurationFlag{Name: "ttl", Usage: "lifetime limit: stop and remove the sandbox `DURATION` after creation (whole seconds)", DefaultText: "the snapshot's"},
			&cli.DurationFlag{Name: "idle-timeout", Usage: "stop and remove it after `DURATION` without an exec or file operation", DefaultText: "the snapshot's"},
			&cli.DurationFlag{Name: "exec-timeout", Usage: "default timeout of each command run in it, `DURATION`", DefaultText: "the snapshot's"},
			&cli.IntFlag{Name: "max-execs", Usage: "refuse commands after `N` have run in it", DefaultText: "the snapshot's"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args, err := exactArgs(c, 1, "agentbox restore [--name NAME] [FLAGS] SNAPSHOT")
			if err != nil {
				return err
			}
			req := api.RestoreRequest{Name: c.String("name")}
			if n := c.Int("count"); n < 1 || n > api.MaxRestoreCount {
				return fmt.Errorf("--count %d: want 1 to %d sandboxes", n, api.MaxRestoreCount)
			} else if n > 1 {
				req.Count = n
			}
			if req.Labels, err = parseLabels(c.StringSlice("label")); err != nil {
				return err
			}
			if req.Limits.TTLSeconds, err = wholeSeconds(c, "ttl"); err != nil {
				return err
			}
			if req.Limits.IdleTimeoutSeconds, err = wholeSeconds(c, "idle-timeout"); err != nil {
				return err
			}
			if t := c.Duration("exec-timeout"); t < 0 {
				return fmt.Errorf("--exec-timeout %s: must be positive", t)
			} else {
				req.Limits.ExecTimeoutMs = t.Milliseconds()
			}
			if req.Limits.MaxExecs = c.Int("max-execs"); req.Limits.MaxExecs < 0 {
				return fmt.Errorf("--max-execs %d: must be positive", req.Limits.MaxExecs)
			}
			list, err := cl.RestoreSnapshots(ctx, args[0], req)
			if err != nil {
				return err
			}
			for _, sb := range list {
				fmt.Fprintln(c.App.Writer, sb.ID)
			}
			return nil
		}),
	}
}

// writeSnapshotTable writes the `snapshot ls` table; ages count up to now.
func writeSnapshotTable(w io.Writer, list []api.Snapshot, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tSANDBOX\tIMAGE\tCPUS\tMEMORY\tVMSTATE\tDISK\tSAVE\tAGE")
	for _, s := range list {
		src := s.Sandbox
		if s.SandboxName != "" {
			src = s.SandboxName
		}
		if s.SourceRemoved {
			src += " (removed)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%dMiB\t%s\t%s\t%s\t%s\n", s.Name, s.ID, src, s.Image.Name, s.VCPUs, s.MemoryMiB,
			mib(s.VMStateBytes), mib(s.DiskBytes), (time.Duration(s.SaveMs) * time.Millisecond).String(), age(now.Sub(s.CreatedAt)))
	}
	return tw.Flush()
}
