package clusterproxy_test

import (
	"context"
	"io"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
)

// BenchmarkExecRoundTrip is an exec round trip (POST .../exec, its ndjson
// stream to the exit event) of a fake backend: direct to the owning node,
// and through another node that proxies it. The difference is the
// proxy's cost per exec (loopback, keep-alive connections).
func BenchmarkExecRoundTrip(b *testing.B) {
	_, a, owner := twoNodes(b)
	for _, bc := range []struct {
		name string
		via  *node
	}{{"direct", owner}, {"proxied", a}} {
		b.Run(bc.name, func(b *testing.B) {
			c := bc.via.client(b)
			req := api.ExecRequest{Cmd: []string{"true"}}
			for b.Loop() {
				if _, err := c.Exec(context.Background(), idB, req, io.Discard, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
