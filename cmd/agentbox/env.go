package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
)

// runEnv is what a command needs to manage sandboxes in-process: the one
// libvirt connection and the sandbox manager on top of it.
type runEnv struct {
	conn *libvirt.Conn
	mgr  *sandbox.Manager
}

// openEnv connects to libvirtd and builds the sandbox manager from the
// global flags.
func openEnv(ctx context.Context, c *cli.Context) (*runEnv, error) {
	logger, err := newLogger(c.String("log-level"))
	if err != nil {
		return nil, err
	}
	conn, err := libvirt.Connect(ctx, libvirt.Config{URI: c.String("uri"), Socket: c.String("libvirt-socket"), Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("connect to libvirt at %s: %w (is libvirtd running? start it with `libvirtd -d` or `systemctl start libvirtd`)", c.String("uri"), err)
	}
	stateDir, err := filepath.Abs(c.String("state-dir"))
	if err != nil {
		conn.Close()
		return nil, err
	}
	runtimeDir, err := filepath.Abs(c.String("runtime-dir"))
	if err != nil {
		conn.Close()
		return nil, err
	}
	drv := libvirt.NewDriver(conn)
	mgr, err := sandbox.NewManager(sandbox.Config{
		Driver:     drv,
		Limits:     resources.New(drv, logger),
		StateDir:   stateDir,
		RuntimeDir: runtimeDir,
		Logger:     logger,
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &runEnv{conn: conn, mgr: mgr}, nil
}

// Close closes the libvirt connection.
func (e *runEnv) Close() error { return e.conn.Close() }

// newLogger returns the one structured logger, writing text to stderr.
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
