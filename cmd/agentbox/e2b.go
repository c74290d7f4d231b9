package main

import (
	"github.com/urfave/cli/v2"
)

// serveE2BFlags are `serve`'s E2B flags.
func serveE2BFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "e2b-listen", Usage: "also serve the E2B API (control and data plane, for the unmodified e2b SDK) on TCP `ADDR` (host:port); needs --token-file or --tenants: the admin's or a tenant's token is the SDK's E2B_API_KEY"},
		&cli.BoolFlag{Name: "e2b-warm", Usage: "start every E2B sandbox warm (as create --warm does: from its template's saved ready state; the first create of a template and shape boots once to save it), as the E2B API has no way to ask"},
	}
}
