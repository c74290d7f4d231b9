// Command agentbox runs commands in virtual machines built from
// reproducible images: `agentbox run --image DIR -- CMD...` boots a fresh
// sandbox, runs CMD in it through the guest agent, streams its output and
// exits with its exit code. `agentbox serve` is the daemon that keeps
// long-lived sandboxes behind a REST API; create, exec, cp, ls, inspect,
// logs, audit, stop, rm and the other client commands talk to it through
// vmctl/client.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// --version has no -v: `run -v` is --verbose, and a stray global -v
	// must not silently print the version instead of running a command.
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version and exit"}
	app := newApp()
	err := app.Run(hoistGlobalFlags(app, os.Args))
	os.Exit(exitCode(err, os.Stderr))
}

// newApp builds the CLI: global flags shared by every subcommand, and one
// file per subcommand (run.go, ...).
func newApp() *cli.App {
	return &cli.App{
		Name:    "agentbox",
		Usage:   "run AI agents' commands in isolated, reproducible virtual machines",
		Version: version,
		Description: "Every sandbox is a KVM/QEMU virtual machine started through libvirt from an immutable image,\n" +
			"with its own qcow2 overlay that is deleted when the sandbox ends.\n\n" +
			"`agentbox serve` keeps long-lived sandboxes behind a REST API on a unix socket (--socket); create,\n" +
			"exec, cp, ls, inspect, logs, audit, stop, pause, resume, start, rm, ps, output, stdin, kill and events are its clients\n" +
			"(--host URL and --token-file reach a daemon over TCP). `agentbox run` uses the daemon when one\n" +
			"answers, else runs the sandbox in-process.\n\n" +
			"Images come from --image DIR, or from a profile of a Nix flake (--flake, $AGENTBOX_FLAKE, default \".\"):\n" +
			"`agentbox run PROFILE -- CMD` builds it with nix; `agentbox profile ls|lock|verify` manage the lock file.\n\n" +
			"Flags can also come from a TOML config file (--config, $AGENTBOX_CONFIG, or /etc/agentbox/config.toml)\n" +
			"whose keys are the long flag names, e.g. `accel = \"tcg\"` or `memory = 512`.\n" +
			"Precedence: command line, then environment, then config file, then defaults.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "TOML config `FILE` (keys are long flag names)", EnvVars: []string{"AGENTBOX_CONFIG"}},
			&cli.StringFlag{Name: "uri", Value: "qemu:///system", Usage: "libvirt connection `URI`", EnvVars: []string{"AGENTBOX_URI", "LIBVIRT_DEFAULT_URI"}},
			&cli.StringFlag{Name: "libvirt-socket", Usage: "libvirtd unix socket `PATH` (default: derived from --uri)", EnvVars: []string{"AGENTBOX_LIBVIRT_SOCKET"}},
			&cli.StringFlag{Name: "state-dir", Value: "/var/lib/agentbox", Usage: "`DIR` for sandbox overlays and console logs", EnvVars: []string{"AGENTBOX_STATE_DIR"}},
			&cli.StringFlag{Name: "runtime-dir", Value: "/run/agentbox", Usage: "`DIR` for agent sockets (keep the path short)", EnvVars: []string{"AGENTBOX_RUNTIME_DIR"}},
			&cli.StringFlag{Name: "log-level", Value: "warn", Usage: "log `LEVEL`: debug, info, warn or error", EnvVars: []string{"AGENTBOX_LOG_LEVEL"}},
		}, append(daemonFlags(), profileFlags()...)...),
		Commands: []*cli.Command{
			runCommand(),
			serveCommand(),
			mcpCommand(),
			createCommand(),
			execCommand(),
			psCommand(),
			historyCommand(),
			outputCommand(),
			stdinCommand(),
			killCommand(),
			attachCommand(),
			cpCommand(),
			portCommand(),
			watchCommand(),
			lsCommand(),
			inspectCommand(),
			logsCommand(),
			auditCommand(),
			stopCommand(),
			timeoutCommand(),
			pauseCommand(),
			resumeCommand(),
			startCommand(),
			rmCommand(),
			snapshotCommand(),
			restoreCommand(),
			warmCommand(),
			templatesCommand(),
			nodesCommand(), // nodes.go
			nodeCommand(),
			eventsCommand(),
			accelCommand(),
			profileCommand(),
			tenantCommand(),
		},
		Before: func(c *cli.Context) error {
			_, err := newLogger(c.String("log-level"))
			return err
		},
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(os.Stderr, "agentbox: unknown command %q: see `agentbox --help`\n", name)
			os.Exit(ExitAgentboxFailed)
		},
		OnUsageError:   usageError,
		ExitErrHandler: func(*cli.Context, error) {}, // main prints and maps errors
	}
}

// exitCode prints err (if any) to stderr and returns the process exit
// status exitStatus (exit.go) maps it to.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	code, msg := exitStatus(err)
	if msg != "" {
		fmt.Fprintln(stderr, "agentbox:", msg)
	}
	return code
}
