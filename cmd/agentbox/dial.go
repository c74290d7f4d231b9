package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/client"
)

// defaultSocket is the daemon's unix socket when neither --socket nor
// $AGENTBOX_SOCKET names another.
const defaultSocket = "/run/agentbox/agentbox.sock"

// daemonFlags are the global flags that say where the daemon is: `serve`
// listens on --socket, every client command dials it (or --host).
func daemonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "socket", Value: defaultSocket, Usage: "the daemon's unix socket `PATH` (serve listens there, client commands dial it)", EnvVars: []string{"AGENTBOX_SOCKET"}},
		&cli.StringFlag{Name: "host", Usage: "reach a daemon over TCP at `URL` (e.g. https://h:7070) instead of --socket", EnvVars: []string{"AGENTBOX_HOST"}},
		&cli.StringFlag{Name: "token-file", Usage: "`FILE` holding the bearer token for --host (or set $AGENTBOX_TOKEN)", EnvVars: []string{"AGENTBOX_TOKEN_FILE"}},
	}
}

// dial returns a client of the daemon the global flags select: --host over
// TCP with the bearer token of --token-file (or $AGENTBOX_TOKEN), else the
// unix socket --socket. Nothing is dialed yet: the first request does, and
// fails with client.ErrUnreachable when nothing listens.
func dial(c *cli.Context) (*client.Client, error) {
	host := c.String("host")
	if host == "" {
		return client.New(c.String("socket")), nil
	}
	var opts []client.Option
	tok := os.Getenv("AGENTBOX_TOKEN")
	if f := c.String("token-file"); f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		tok = strings.TrimSpace(string(data))
		if tok == "" {
			return nil, fmt.Errorf("--token-file %s is empty: it must hold the daemon's bearer token", f)
		}
	}
	if tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	cl, err := client.NewTCP(host, opts...)
	if err != nil {
		return nil, fmt.Errorf("--host %q: %w", host, err)
	}
	return cl, nil
}

// unreachable is the error a client command reports when the daemon cannot
// be dialed (client.ErrUnreachable: no socket file, or nothing accepts):
// where it looked and how to start or name the daemon.
func unreachable(c *cli.Context) error {
	if host := c.String("host"); host != "" {
		return fmt.Errorf("cannot reach the agentbox daemon at %s: connection refused: is `agentbox serve --listen-tcp` running there? (check --host / AGENTBOX_HOST)", host)
	}
	sock := c.String("socket")
	start := "agentbox serve"
	if sock != defaultSocket {
		start = "agentbox serve --socket " + sock
	}
	return fmt.Errorf("cannot reach the agentbox daemon at %s: start it with `%s` (or pass --socket / set AGENTBOX_SOCKET)", sock, start)
}

// noDaemon reports whether err (from a first request to the daemon at
// --host host, or --socket when host is "") means that no daemon is there at all:
// the socket file is missing or nothing accepts on it (a stale socket), the
// two cases client.ErrUnreachable marks. Only then may `agentbox run` fall
// back to running in-process; a daemon that answers with an error, a
// socket we may not open (EACCES), or a --host that does not answer is
// reported.
func noDaemon(host string, err error) bool {
	return host == "" && errors.Is(err, client.ErrUnreachable)
}

// clientFunc is the body of a client command: ctx ends on SIGINT/SIGTERM.
type clientFunc func(ctx context.Context, c *cli.Context, cl *client.Client) error

// clientAction wraps a client command's body: it applies the config file,
// dials the daemon, cancels ctx on SIGINT/SIGTERM, and turns what comes back
// into the CLI's exit status: an interrupt exits 128+N, an unreachable
// daemon says how to start one, and server errors (*api.Error) print their
// message and exit 125 through exitCode.
func clientAction(fn clientFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		if err := applyConfig(c); err != nil {
			return err
		}
		cl, err := dial(c)
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, gotSignal, stop := interrupts(c.Context)
		defer stop()
		err = fn(ctx, c, cl)
		var ee *exitError
		if sig := gotSignal(); sig != 0 && !errors.As(err, &ee) {
			msg := "interrupted by " + unix.SignalName(sig)
			switch {
			case errors.Is(err, errGuestKilled):
				msg = fmt.Sprintf("%s: %s", sig, errGuestKilled) // as in-process `run` says it
			case errors.Is(err, errStopped):
				msg = ""
			}
			return signalExit(sig, msg)
		}
		if errors.Is(err, client.ErrUnreachable) {
			return unreachable(c)
		}
		return err
	}
}

// errStopped is returned by commands that run until interrupted
// (`events`): the signal is their normal end and needs no message.
var errStopped = errors.New("stopped")
