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

func nodesCommand() *cli.Command {
	return &cli.Command{
		Name:  "nodes",
		Usage: "list the nodes of the daemon's cluster (serve --cluster)",
		Description: "Prints one line per node, by name: NODE, STATE (up; draining: pulls no creates; breaker-open: its\n" +
			"creates failed repeatedly, it pulls none for a while; unreachable: no heartbeat for 10 s), CAPACITY and\n" +
			"COMMITTED (vCPUs and memory), SANDBOXES and LAST SEEN (the age of its last heartbeat). A node that is not\n" +
			"up gets a line below the table saying why. -q prints only names; --json the API's objects.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only the names"},
			&cli.BoolFlag{Name: "json", Usage: "print a JSON array of the nodes"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			if _, err := exactArgs(c, 0, "agentbox nodes [-q] [--json]"); err != nil {
				return err
			}
			list, err := cl.ListNodes(ctx)
			if err != nil {
				return err
			}
			return writeList(c, list, func(n api.Node) string { return n.Name }, writeNodeTable)
		}),
	}
}

// writeNodeTable writes the `nodes` table.
func writeNodeTable(w io.Writer, list []api.Node, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tCAPACITY\tCOMMITTED\tSANDBOXES\tLAST SEEN")
	for _, n := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d vCPU %dMiB\t%d vCPU %dMiB\t%d\t%s ago\n", n.Name, n.State,
			n.Capacity.VCPUs, n.Capacity.MemoryMiB, n.Capacity.UsedVCPUs, n.Capacity.UsedMemoryMiB, n.Sandboxes, age(now.Sub(n.LastSeen)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range list { // why a node is not up, below the table
		if n.Reason != "" {
			if _, err := fmt.Fprintf(w, "%s %s: %s\n", n.Name, n.State, n.Reason); err != nil {
				return err
			}
		}
	}
	return nil
}

func nodeCommand() *cli.Command {
	drain := func(name, usage string, drain bool) *cli.Command {
		return &cli.Command{
			Name:         name,
			Usage:        usage,
			ArgsUsage:    "NODE",
			OnUsageError: usageError,
			Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
				args, err := exactArgs(c, 1, "agentbox node "+name+" NODE")
				if err != nil {
					return err
				}
				n, err := cl.DrainNode(ctx, args[0], drain)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "%s %s\n", n.Name, n.State)
				return nil
			}),
		}
	}
	return &cli.Command{
		Name:  "node",
		Usage: "drain or undrain a node of the cluster",
		Subcommands: []*cli.Command{
			drain("drain", "stop the node pulling new creates (its sandboxes keep running; it stays drained across restarts)", true),
			drain("undrain", "let the node pull creates again", false),
		},
	}
}
