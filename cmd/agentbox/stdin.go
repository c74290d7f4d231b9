package main

import (
	"context"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

func stdinCommand() *cli.Command {
	return &cli.Command{
		Name:      "stdin",
		Usage:     "send our stdin to a detached process's stdin",
		ArgsUsage: "SANDBOX PROCESS",
		Description: "Copies this command's stdin to the stdin of PROCESS, a detached process started with\n" +
			"`agentbox exec -d -i`. With --close its stdin is closed afterwards (the process sees EOF);\n" +
			"without, later `agentbox stdin` calls can send more.\n\n" +
			"Exit status: 0 when all bytes were delivered; 125 otherwise (stdin not open, process exited).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "close", Usage: "close the process's stdin after our EOF"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args, err := exactArgs(c, 2, "agentbox stdin [--close] SANDBOX PROCESS")
			if err != nil {
				return err
			}
			_, err = cl.WriteStdin(ctx, args[0], args[1], c.App.Reader, c.Bool("close"))
			return err
		}),
	}
}
