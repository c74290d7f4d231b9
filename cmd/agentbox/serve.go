package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// serveCommand is `agentbox serve` (work in progress by the lead).
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the agentbox daemon: REST API on a unix socket, long-lived sandboxes",
		Action: func(c *cli.Context) error {
			return errors.New("serve: not built yet")
		},
	}
}
