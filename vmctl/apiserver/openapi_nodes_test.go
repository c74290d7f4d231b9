package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
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
		{name: "cluster secrets", method: "POST", target: "/v1/cluster/secrets", ct: "json", body: `{"create":"` + secretsRef + `"}`, status: 200,
			router: secretsRouter{specs: []api.SecretSpec{{Name: "K", Value: "v", Hosts: []string{"h.test"}}}},
			check:  bodyIs(`{"secrets":[{"name":"K","value":"v","hosts":["h.test"]}]}` + "\n")},
	}
}

const secretsRef = "0123456789abcdef0123456789abcdef"

// secretsRouter is a Router holding one create's secrets (or failing).
type secretsRouter struct {
	noRouter
	specs []api.SecretSpec
	err   error
}

func (r secretsRouter) CreateSecrets(_ context.Context, create string) ([]api.SecretSpec, error) {
	if create != secretsRef {
		return nil, errdefs.ErrNotFound.WithMessage("no such create")
	}
	return r.specs, r.err
}

// The cluster secrets route: a malformed reference is refused before the
// Router, a refusal of the Router is answered as it is, a daemon outside
// a cluster answers 501.
func TestClusterSecretsRouteErrors(t *testing.T) {
	for _, c := range []apiCase{
		{name: "bad reference", body: `{"create":"../x"}`, status: 400, code: api.CodeInvalidArgument, offDoc: true, router: secretsRouter{}},
		{name: "not the taker", body: `{"create":"` + secretsRef + `"}`, status: 403, code: api.CodePermissionDenied,
			router: secretsRouter{err: errdefs.ErrPermissionDenied.WithMessage("node b did not take create")}},
		{name: "gone", body: `{"create":"fedcba9876543210fedcba9876543210"}`, status: 404, code: api.CodeNotFound, router: secretsRouter{}},
		{name: "not a cluster", body: `{"create":"` + secretsRef + `"}`, status: 501, code: api.CodeNotImplemented},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := apiserver.Config{Backend: &backendtest.Fake{}}
			if c.router != nil {
				cfg.Router, cfg.Keyring = c.router, auth.New(auth.Config{Peer: "0123456789abcdef"})
			}
			srv, err := apiserver.NewServer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("POST", "http://localhost/v1/cluster/secrets", strings.NewReader(c.body))
			r.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, r)
			var er api.ErrorResponse
			if rec.Code != c.status || json.Unmarshal(rec.Body.Bytes(), &er) != nil || er.Error.Code != c.code {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, c.status, c.code)
			}
		})
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
