package main

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/client"
)

func createCommand() *cli.Command {
	return &cli.Command{
		Name:      "create",
		Usage:     "boot a long-lived sandbox through the daemon and print its ID",
		ArgsUsage: "[PROFILE | --template NAME]",
		Description: "Asks the daemon to boot a sandbox from --image DIR and waits until its guest agent answers.\n" +
			"Instead of --image, PROFILE names an image of the flake (--flake): it is built here with nix\n" +
			"(--locked refuses one that differs from the lock file) and its store path is sent, so it must\n" +
			"exist on the daemon's host too (the same host, or one with the same store path). --template NAME\n" +
			"boots one of the daemon's named templates instead (`agentbox templates`). Only\n" +
			"the sandbox ID is printed on stdout, so scripts can do `id=$(agentbox create --image DIR)`.\n" +
			"The sandbox runs until `agentbox stop`/`rm`, its --ttl or its --idle-timeout (which may\n" +
			"stop or pause it instead of removing it: --ttl-action, --idle-action). --env sets variables\n" +
			"every command run in it gets. --secret NAME=@FILE with --secret-host NAME=HOST keeps a value\n" +
			"out of the guest: it sees a placeholder in $NAME, replaced on the host in HTTPS request headers to HOST.\n\n" +
			"Exit status: 0 once it runs; 125 if it could not be created (bad image, name taken, the host's\n" +
			"capacity reached, boot failure: the message says which).",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "image", Usage: "image `DIR` on the daemon's host (holds manifest.toml); sent as an absolute path", EnvVars: []string{"AGENTBOX_IMAGE"}},
			&cli.StringFlag{Name: "name", Usage: "a unique `NAME` to refer to the sandbox by, besides its ID"},
			&cli.IntFlag{Name: "cpus", Usage: "virtual `CPUS`", DefaultText: "the image's"},
			&cli.IntFlag{Name: "memory", Usage: "guest memory in `MiB`", DefaultText: "the image's"},
			&cli.StringSliceFlag{Name: "label", Aliases: []string{"l"}, Usage: "attach label `KEY=VALUE` (repeatable; `ls --label` filters on them)"},
			&cli.DurationFlag{Name: "ttl", Usage: "stop and remove the sandbox `DURATION` after creation (whole seconds)", DefaultText: "the daemon's"},
			&cli.DurationFlag{Name: "idle-timeout", Usage: "stop and remove it after `DURATION` without an exec or file operation", DefaultText: "the daemon's"},
			&cli.DurationFlag{Name: "exec-timeout", Usage: "default timeout of each command run in it, `DURATION`", DefaultText: "the daemon's"},
			&cli.IntFlag{Name: "max-execs", Usage: "refuse commands after `N` have run in it", DefaultText: "the daemon's"},
			&cli.StringFlag{Name: "accel", Value: "auto", Usage: "accelerator: auto (KVM only where a probe guest runs), kvm or tcg", EnvVars: []string{"AGENTBOX_ACCEL"}},
			&cli.DurationFlag{Name: "boot-timeout", Value: 120 * time.Second, Usage: "give up if the guest agent has not answered after `DURATION`"},
			&cli.BoolFlag{Name: "locked", Usage: "refuse a PROFILE whose image differs from the lock file (written by agentbox profile lock)"},
			&cli.BoolFlag{Name: "warm", Usage: "start from the image's saved \"ready\" state instead of booting (the first --warm create of an image and shape boots once to save it)"},
			networkFlag, allowFlag, dnsFlag, createTemplateFlag, createEnvFlag, priorityFlag,
			createSecretFlag, createSecretHostFlag, // createsecrets.go
		}, append(append(resourceFlags(), profileFlags()...), idleFlags()...)...),
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			if c.String("template") != "" {
				return createFromTemplate(ctx, c, cl) // templates.go
			}
			name, rest, err := imageArgs(c, false, "agentbox create [FLAGS] PROFILE")
			if err != nil {
				return err
			}
			// Nothing may follow: no arguments with --image, the PROFILE alone otherwise.
			if _, err := exactArgs(c, c.Args().Len()-len(rest), "agentbox create [FLAGS] --image DIR  |  agentbox create [FLAGS] PROFILE"); err != nil {
				return err
			}
			if _, err := accel.ParseMode(c.String("accel")); err != nil {
				return err
			}
			imageDir := c.String("image")
			if name != "" {
				if imageDir, err = resolveProfile(ctx, c, name, false); err != nil {
					return err
				}
			}
			req, err := createRequest(c, imageDir)
			if err != nil {
				return err
			}
			if req.Env, err = sandboxEnv(c); err != nil { // createenv.go
				return err
			}
			if req.Secrets, err = sandboxSecrets(c); err != nil { // createsecrets.go
				return err
			}
			req.Warm = c.Bool("warm")
			sb, err := cl.CreateSandbox(ctx, req)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, sb.ID)
			return nil
		}),
	}
}
