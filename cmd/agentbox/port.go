package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

func portCommand() *cli.Command {
	const usage = "agentbox port [--publish [ADDR:]PORT] SANDBOX GUEST_PORT"
	return &cli.Command{
		Name:      "port",
		Usage:     "forward a host port to a port in a sandbox (over the guest agent: no guest network needed)",
		ArgsUsage: "SANDBOX GUEST_PORT",
		Description: "Opens a listener on this host (the daemon's) whose TCP connections each go to GUEST_PORT on\n" +
			"the guest's loopback (127.0.0.1, else ::1), carried over the guest agent's channel: it works\n" +
			"for a sandbox with --network none and opens nothing else in the guest. Prints\n" +
			"`HOST_ADDR → guest :GUEST_PORT`. By default the listener is on 127.0.0.1 with a free port;\n" +
			"--publish PORT takes 127.0.0.1:PORT, --publish ADDR:PORT another address of this host\n" +
			"(0.0.0.0:PORT: every interface — anyone who reaches it reaches the guest's port).\n\n" +
			"The forward lasts until `agentbox port rm` or the sandbox's removal; a restarted daemon opens\n" +
			"it again at the same address, and so does `agentbox start` after a stop (it is listed closed\n" +
			"meanwhile). While the sandbox is paused a connection is reset at once; after `agentbox\n" +
			"resume` it works again. A paused sandbox is refused a new forward; --resume resumes it first.\n" +
			"`agentbox port ls` lists them with their connections; `agentbox inspect` shows them too. A\n" +
			"connection to a guest port nobody listens on is closed at once (reset) and counted as failed,\n" +
			"with the reason in `port ls`.\n\n" +
			"Exit status: 0; 125 if the forward could not be opened (address in use, bad port…).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "publish", Aliases: []string{"p"}, Usage: "host `[ADDR:]PORT` to listen on (default 127.0.0.1 and a free port)"},
			resumeFlag(),
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args, err := exactArgs(c, 2, usage)
			if err != nil {
				return err
			}
			port, err := guestPort(args[1], usage)
			if err != nil {
				return err
			}
			req := api.PortForwardRequest{GuestPort: port, HostAddr: publishAddr(c.String("publish"))}
			p, err := resuming(c, cl).ForwardPort(ctx, args[0], req)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "%s → guest :%d\n", p.HostAddr, p.GuestPort)
			return nil
		}),
		Subcommands: []*cli.Command{
			{
				Name:      "ls",
				Aliases:   []string{"list"},
				Usage:     "list a sandbox's port forwards",
				ArgsUsage: "SANDBOX",
				Description: "Prints one line per forward, by guest port: GUEST (port), HOST (listener address), CONNS\n" +
					"(accepted since the daemon opened it), ACTIVE, FAILED, IN/OUT (bytes to the guest and back),\n" +
					"AGE, and LAST ERROR (of the last failed connection, or why the listener is not open).\n" +
					"-q prints only the guest ports; --json the API's objects.",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only the guest ports"},
					&cli.BoolFlag{Name: "json", Usage: "print a JSON array of the forwards"},
				},
				OnUsageError: usageError,
				Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					args, err := exactArgs(c, 1, "agentbox port ls [-q] [--json] SANDBOX")
					if err != nil {
						return err
					}
					list, err := cl.ListPorts(ctx, args[0])
					if err != nil {
						return err
					}
					return writeList(c, list, func(p api.PortForward) string { return strconv.Itoa(p.GuestPort) }, writePortTable)
				}),
			},
			{
				Name:      "rm",
				Usage:     "remove port forwards (their listeners close, their connections are reset)",
				ArgsUsage: "SANDBOX GUEST_PORT...",
				Description: "Removes the forward of each GUEST_PORT of SANDBOX and prints the port.\n\n" +
					"Exit status: 0; 125 if any could not be removed (the others still are).",
				OnUsageError: usageError,
				Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					const usage = "agentbox port rm SANDBOX GUEST_PORT..."
					args, err := someArgs(c, usage)
					if err != nil {
						return err
					}
					if len(args) < 2 {
						return fmt.Errorf("no guest port given: usage: %s", usage)
					}
					var errs []error
					for _, a := range args[1:] {
						port, err := guestPort(a, usage)
						if err == nil {
							err = cl.RemovePort(ctx, args[0], port)
						}
						if err != nil {
							if ctx.Err() != nil {
								return err
							}
							errs = append(errs, err)
							continue
						}
						fmt.Fprintln(c.App.Writer, port)
					}
					return joinRefErrors(c, errs)
				}),
			},
		},
	}
}

// guestPort parses a GUEST_PORT argument.
func guestPort(s, usage string) (int, error) {
	if err := api.CheckPort(s); err != nil {
		return 0, fmt.Errorf("%v: usage: %s", err, usage)
	}
	n, _ := strconv.Atoi(s)
	return n, nil
}

// publishAddr turns --publish into the API's host_addr: "" stays ""
// (the daemon's default), a bare PORT is 127.0.0.1:PORT.
func publishAddr(s string) string {
	if _, err := strconv.Atoi(s); err == nil {
		return "127.0.0.1:" + s
	}
	return s
}

// writePortTable writes the `port ls` table; ages count up to now.
func writePortTable(w io.Writer, list []api.PortForward, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GUEST\tHOST\tCONNS\tACTIVE\tFAILED\tIN/OUT\tAGE\tLAST ERROR")
	for _, p := range list {
		last := p.LastError
		if !p.Open {
			last = "not open: " + p.Error
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s/%s\t%s\t%s\n", p.GuestPort, p.HostAddr, p.Connections, p.Active, p.Failed,
			mib(p.BytesIn), mib(p.BytesOut), age(now.Sub(p.CreatedAt)), last)
	}
	return tw.Flush()
}
