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

func warmCommand() *cli.Command {
	return &cli.Command{
		Name:  "warm",
		Usage: "list and remove warm templates (the saved \"ready\" states `create --warm` starts from)",
		Description: "The first `create --warm` of an image and machine shape boots it once and saves it ready as a\n" +
			"warm template; later ones start from it. Every shape is a template of its own (another\n" +
			"--cpus, --memory, --disk, limit or --network mode makes another). The daemon keeps at most\n" +
			"`serve --warm-templates` of them (8) and removes the least recently used when it builds\n" +
			"another. With `serve --warm-pool N` each template also has up to N paused, pre-restored\n" +
			"sandboxes (POOLED): they are not listed by `agentbox ls` and not counted against the\n" +
			"daemon's capacity, but each holds its guest memory on the host.",
		Subcommands: []*cli.Command{
			{
				Name:    "ls",
				Aliases: []string{"list"},
				Usage:   "list warm templates, most recently used first",
				Description: "Prints one line per template: KEY, IMAGE, SHAPE (vCPUs, memory, disk, network), SIZE (on the\n" +
					"host's disk), POOLED (paused sandboxes waiting in its pool), LAST USED, BUILD (how long its\n" +
					"cold boot and save took). -q prints only keys; --json the API's objects.",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only the keys"},
					&cli.BoolFlag{Name: "json", Usage: "print a JSON array of the templates"},
				},
				OnUsageError: usageError,
				Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					if _, err := exactArgs(c, 0, "agentbox warm ls [-q] [--json]"); err != nil {
						return err
					}
					list, err := cl.ListWarm(ctx)
					if err != nil {
						return err
					}
					return writeList(c, list, func(t api.WarmTemplate) string { return t.Key }, writeWarmTable)
				}),
			},
			{
				Name:      "rm",
				Usage:     "remove warm templates and their pools",
				ArgsUsage: "KEY... | --all",
				Description: "Removes each template KEY (see `agentbox warm ls`), with its pool's paused sandboxes, and\n" +
					"prints the key; --all removes every template. The next warm create of a removed shape\n" +
					"builds it again (one cold boot). Sandboxes already started from a template are not\n" +
					"affected.\n\n" +
					"Exit status: 0; 125 if any could not be removed (the others still are).",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "remove every warm template"},
				},
				OnUsageError: usageError,
				Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					usage := "agentbox warm rm KEY... | agentbox warm rm --all"
					keys := c.Args().Slice()
					if err := noFlagsAfter(keys, usage); err != nil {
						return err
					}
					switch {
					case c.Bool("all") && len(keys) > 0:
						return fmt.Errorf("give keys or --all, not both: usage: %s", usage)
					case c.Bool("all"):
						list, err := cl.ListWarm(ctx)
						if err != nil {
							return err
						}
						for _, t := range list {
							keys = append(keys, t.Key)
						}
					case len(keys) == 0:
						return fmt.Errorf("no argument given: usage: %s", usage)
					}
					var errs []error
					for _, k := range keys {
						if err := cl.DeleteWarm(ctx, k); err != nil {
							if ctx.Err() != nil {
								return err
							}
							errs = append(errs, err)
							continue
						}
						fmt.Fprintln(c.App.Writer, k)
					}
					return joinRefErrors(c, errs)
				}),
			},
		},
	}
}

// writeWarmTable writes the `warm ls` table; ages count up to now.
func writeWarmTable(w io.Writer, list []api.WarmTemplate, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tIMAGE\tSHAPE\tSIZE\tPOOLED\tLAST USED\tBUILD")
	for _, t := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s ago\t%s\n", t.Key, t.Image.Name, warmShape(t), mib(t.SizeBytes), t.Pooled,
			age(now.Sub(t.LastUsedAt)), (time.Duration(t.BuildMs) * time.Millisecond).Round(100*time.Millisecond))
	}
	return tw.Flush()
}

// warmShape renders a template's shape: "2cpu/512MiB/disk 2048MiB/net".
func warmShape(t api.WarmTemplate) string {
	s := fmt.Sprintf("%dcpu/%dMiB", t.VCPUs, t.MemoryMiB)
	if t.DiskMiB > 0 {
		s += fmt.Sprintf("/disk %dMiB", t.DiskMiB)
	}
	if t.Network {
		s += "/net"
	} else {
		s += "/no net"
	}
	return s
}
