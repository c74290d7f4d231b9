package apiserver_test

import (
	"context"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// nodeSuccessCases cover the cluster node routes (see successCases).
func nodeSuccessCases() []apiCase {
	return []apiCase{
		{name: "list nodes", method: "GET", target: "/v1/nodes", status: 200, called: true},
		{name: "list no nodes", method: "GET", target: "/v1/nodes", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.Nodes.ListFn = func(context.Context) ([]api.Node, error) { return nil, nil }
		}},
		{name: "drain a node", method: "POST", target: "/v1/nodes/h1/drain", status: 200, called: true},
		{name: "undrain a node", method: "POST", target: "/v1/nodes/h1/undrain", status: 200, called: true},
	}
}

// TestNodeRouteErrors: a bad node name is refused before the backend; an
// unknown node is 404, NATS down 503 cluster_unavailable, a daemon
// outside a cluster 501.
func TestNodeRouteErrors(t *testing.T) {
	unavailable := errdefs.New(errdefs.ErrUnavailable, api.CodeClusterUnavailable, "NATS is unreachable")
	checkRouteErrors(t, []routeError{
		{"bad node name", "POST", "/v1/nodes/-x/drain", "", nil, 400, api.CodeInvalidArgument},
		{"unknown node", "POST", "/v1/nodes/ghost/drain", "", func(b *backendtest.Fake) {
			b.Nodes.DrainFn = func(context.Context, string, bool) (api.Node, error) {
				return api.Node{}, errdefs.ErrNotFound.WithMessage(`node "ghost" is not in the cluster`)
			}
		}, 404, api.CodeNotFound},
		{"NATS down", "GET", "/v1/nodes", "", func(b *backendtest.Fake) {
			b.Nodes.ListFn = func(context.Context) ([]api.Node, error) {
				return nil, unavailable.WithMessage("NATS is unreachable: cluster creates resume when it is back")
			}
		}, 503, api.CodeClusterUnavailable},
		{"not a cluster", "GET", "/v1/nodes", "", func(b *backendtest.Fake) {
			b.Nodes.ListFn = func(context.Context) ([]api.Node, error) {
				return nil, errdefs.ErrNotImplemented.WithMessage("this daemon is not in a cluster")
			}
		}, 501, api.CodeNotImplemented},
	})
}
