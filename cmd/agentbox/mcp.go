package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/mcp"
)

// mcpFlags are the MCP server's flags, on `agentbox mcp` and (prefixed
// --mcp-) on `agentbox serve`.
func mcpFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "mcp-cleanup", Usage: "remove the sandboxes an MCP session created and the snapshots it took when the session ends"},
		&cli.IntFlag{Name: "mcp-output-limit", Value: mcp.DefaultOutputLimit, Usage: "bound run_command's stdout and stderr to `BYTES` each (the middle is cut, the answer says how much)"},
		&cli.Int64Flag{Name: "mcp-file-limit", Value: mcp.DefaultFileLimit, Usage: "largest file read_file returns and write_file takes, in `BYTES`"},
		&cli.StringFlag{Name: "mcp-image", Usage: "image `DIR` create_sandbox uses when a call names neither image nor template", EnvVars: []string{"AGENTBOX_IMAGE"}},
	}
}

func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve the Model Context Protocol on stdin/stdout, for an agent's MCP client",
		Description: "Speaks MCP (JSON-RPC over stdio) with the agent that started it, e.g. a desktop agent whose\n" +
			"config file lists `agentbox mcp` as a server. Its tools (create_sandbox, run_command, read_file,\n" +
			"write_file, ...) go to the daemon (--socket, or --host with --token-file) like every client command;\n" +
			"with --local the daemon's service runs in this process instead (as `run --local`: its sandboxes\n" +
			"are removed when it ends). Sandboxes a session creates carry the label agentbox.mcp-session=ID; with\n" +
			"--mcp-cleanup they and the session's snapshots are removed when the session ends (stdin closed).\n" +
			"Logs go to stderr. See docs/mcp.md.",
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "local", Usage: "run the sandbox service in-process instead of talking to a daemon"},
		}, append(mcpFlags(), profileFlags()...)...),
		OnUsageError: usageError,
		Action:       mcpAction,
	}
}

// mcpAction implements `agentbox mcp`.
func mcpAction(c *cli.Context) error {
	if err := applyConfig(c); err != nil {
		return err
	}
	if c.Args().Present() {
		return fmt.Errorf("mcp takes no arguments, got %q", c.Args().Slice())
	}
	logger, err := newLogger(c.String("log-level"))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var cl *client.Client
	if c.Bool("local") {
		svc, err := startLocal(ctx, c, localOptions{RunID: newRunID()})
		if err != nil {
			return err
		}
		defer func() {
			if err := svc.Close(ctx); err != nil {
				fmt.Fprintln(c.App.ErrWriter, "agentbox mcp: teardown:", err)
			}
		}()
		cl = svc.Client
	} else {
		if cl, err = dial(c); err != nil {
			return err
		}
		defer cl.Close()
		if _, err := cl.Info(ctx); err != nil {
			if errors.Is(err, client.ErrUnreachable) {
				return fmt.Errorf("%w, or pass --local to run the service in-process", unreachable(c))
			}
			return fmt.Errorf("the agentbox daemon at %s: %w", daemonAddr(c), err)
		}
	}
	srv, err := newMCPServer(c, cl, logger)
	if err != nil {
		return err
	}
	return srv.Serve(ctx, mcp.NewStdioTransport(os.Stdin, os.Stdout))
}

// newMCPServer makes the MCP server of the flags over cl (mcpConfig).
func newMCPServer(c *cli.Context, cl *client.Client, logger *slog.Logger) (*mcp.Server, error) {
	cfg, err := mcpConfig(c, logger)
	if err != nil {
		return nil, err
	}
	cfg.Client = cl
	return mcp.New(cfg)
}

// mcpConfig is the MCP server's configuration from the flags, without
// its Client; templates are profiles of the flake (--flake), built here
// with nix.
func mcpConfig(c *cli.Context, logger *slog.Logger) (mcp.Config, error) {
	image := c.String("mcp-image")
	if image != "" {
		abs, err := filepath.Abs(image)
		if err != nil {
			return mcp.Config{}, err
		}
		image = abs
	}
	return mcp.Config{
		Version:      version,
		DefaultImage: image,
		ResolveTemplate: func(ctx context.Context, name string) (string, error) {
			r, err := newResolver(c, c.App.ErrWriter)
			if err != nil {
				return "", err
			}
			return r.Resolve(ctx, name)
		},
		OutputLimit: c.Int("mcp-output-limit"),
		FileLimit:   c.Int64("mcp-file-limit"),
		Cleanup:     c.Bool("mcp-cleanup"),
		Logger:      logger,
	}, nil
}

// serveMCPFlags are `serve`'s MCP flags.
func serveMCPFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.BoolFlag{Name: "mcp", Usage: "also serve MCP (streamable HTTP) at /mcp on the API's listeners, behind the same auth"},
		&cli.DurationFlag{Name: "mcp-session-timeout", Value: 30 * time.Minute, Usage: "end an MCP session idle this long (its sandboxes are removed with --mcp-cleanup); 0: never"},
	}, mcpFlags()...)
}
