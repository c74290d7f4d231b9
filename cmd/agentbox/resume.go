package main

import (
	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

// resumeFlag is --resume of the commands whose calls can resume a paused
// sandbox first (the API's ?resume=true): exec, cp, port.
func resumeFlag() cli.Flag {
	return &cli.BoolFlag{Name: "resume", Usage: "if the sandbox is paused (in memory or to disk), resume it first instead of failing"}
}

// resuming returns cl, asking to resume a paused sandbox first with
// --resume (client.Client.Resuming).
func resuming(c *cli.Context, cl *client.Client) *client.Client {
	if c.Bool("resume") {
		return cl.Resuming()
	}
	return cl
}
