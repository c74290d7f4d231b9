package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

func lsCommand() *cli.Command {
	return &cli.Command{
		Name:    "ls",
		Aliases: []string{"list"},
		Usage:   "list the daemon's sandboxes",
		Description: "Prints one line per sandbox, oldest first: ID, NAME, STATE, IMAGE, TEMPLATE (the daemon's template\n" +
			"it was created from, `-` for an image directory), CPUS, MEMORY, AGE; in a cluster (serve --cluster) a NODE\n" +
			"column after NAME names each sandbox's node, and a node that does not answer lists its sandboxes\n" +
			"in state unknown; with tenants (serve --tenants) a TENANT column after it (`-` for the admin's\n" +
			"sandboxes).\n" +
			"--label (repeatable) keeps those that have all the given labels, --state those in one state\n" +
			"(creating, running, stopping, stopped, failed). -q prints only IDs; --json the API's objects.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "label", Aliases: []string{"l"}, Usage: "only sandboxes with label `KEY=VALUE` (repeatable: all must match)"},
			&cli.StringFlag{Name: "state", Usage: "only sandboxes in `STATE`"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only the IDs"},
			&cli.BoolFlag{Name: "json", Usage: "print a JSON array of the sandboxes"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			if _, err := exactArgs(c, 0, "agentbox ls [--label K=V]... [--state S] [-q] [--json]"); err != nil {
				return err
			}
			labels, err := parseLabels(c.StringSlice("label"))
			if err != nil {
				return err
			}
			sbs, err := cl.ListSandboxes(ctx, labels, c.String("state"))
			if err != nil {
				return err
			}
			return writeList(c, sbs, func(sb api.Sandbox) string { return sb.ID }, writeSandboxTable)
		}),
	}
}

// writeSandboxTable writes the `ls` table; ages count up to now.
func writeSandboxTable(w io.Writer, sbs []api.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// A cluster's sandboxes carry their node: then a NODE column.
	clustered := slices.ContainsFunc(sbs, func(sb api.Sandbox) bool { return sb.Node != "" })
	nodeCol := func(node string) string {
		if !clustered {
			return ""
		}
		if node == "" {
			node = "-"
		}
		return node + "\t"
	}
	// Tenants' sandboxes carry their tenant: then a TENANT column.
	tenants := slices.ContainsFunc(sbs, func(sb api.Sandbox) bool { return sb.Tenant != "" })
	tenantCol := func(owner string) string {
		if !tenants {
			return ""
		}
		if owner == "" {
			owner = "-"
		}
		return owner + "\t"
	}
	fmt.Fprintln(tw, "ID\tNAME\t"+nodeCol("NODE")+tenantCol("TENANT")+"STATE\tIMAGE\tTEMPLATE\tCPUS\tMEMORY\tAGE")
	for _, sb := range sbs {
		name, template := sb.Name, sb.Template
		if name == "" {
			name = "-"
		}
		if template == "" {
			template = "-"
		}
		if sb.State == api.StateUnknown {
			// Only the directory's entry: the node does not answer.
			fmt.Fprintf(tw, "%s\t%s\t%s%s%s\t-\t-\t-\t-\t-\n", sb.ID, name, nodeCol(sb.Node), tenantCol(sb.Tenant), sb.State)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s%s\t%s\t%s\t%d\t%dMiB\t%s\n", sb.ID, name, nodeCol(sb.Node), tenantCol(sb.Tenant), sb.State, sb.Image.Name, template, sb.VCPUs, sb.MemoryMiB, age(now.Sub(sb.CreatedAt)))
	}
	return tw.Flush()
}
