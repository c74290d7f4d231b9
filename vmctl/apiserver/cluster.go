package apiserver

import (
	"context"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/vmctl/api"
)

// Router sends the requests of a cluster's sandboxes to the node they
// live on, so that any node answers for any sandbox (vmctl/clusterproxy
// implements it; serve --cluster installs it). Without one (a single
// host) every request is served here, exactly as before.
type Router interface {
	// Peer is called for every request r on a TCP listener; peer says
	// whether r carries the cluster peers' token (the server's keyring
	// found auth.Peer): r is one another node of the cluster forwarded.
	// With peer it returns r's context carrying the identity the
	// forwarding node vouched for (api.WithCaller, the tenant), and the
	// server skips its own token check. Without, it removes r's identity
	// headers, which nobody else may set, and returns a nil context. An
	// error (the vouched-for tenant is unknown here) is answered as it is.
	Peer(r *http.Request, peer bool) (context.Context, error)
	// Route serves r, a request of sandbox ref (an ID or a name; its
	// syntax checked), on the node ref lives on and returns true; it
	// returns false when r is to be served here: ref lives here, the
	// cluster does not know it (the local lookup decides, 404 if it
	// fails) or r was forwarded once already. An error is answered by
	// the server (nothing was written yet), e.g. 503 node_unreachable.
	Route(w http.ResponseWriter, r *http.Request, ref string) (served bool, err error)
	// List returns local, the sandboxes of this node that match r (GET
	// /v1/sandboxes and its query), merged with those of the other nodes
	// (asked with r's query and caller), oldest first; a node that does
	// not answer contributes its directory entries in api.StateUnknown.
	List(r *http.Request, local []api.Sandbox) ([]api.Sandbox, error)
	// CreateSecrets answers POST /v1/cluster/secrets: the secret values of
	// the create create (its secrets reference), queued at this node, for
	// the node that took it, which ctx's request must come from (Peer
	// vouched for it); vmctl/cluster keeps them out of NATS. Errors: 403
	// permission_denied for any other request or node, 404 when no such
	// create waits here.
	CreateSecrets(ctx context.Context, create string) ([]api.SecretSpec, error)
}

// clusterSecrets answers another node's fetch of the secrets of a create
// queued here (Router.CreateSecrets); 501 outside a cluster.
func clusterSecrets(s *Server, r *request, req api.ClusterSecretsRequest) (api.ClusterSecrets, error) {
	if s.router == nil {
		return api.ClusterSecrets{}, api.Errorf(http.StatusNotImplemented, api.CodeNotImplemented, "this daemon is not in a cluster: it holds no queued creates' secrets")
	}
	specs, err := s.router.CreateSecrets(r.Context(), req.Create)
	out := api.ClusterSecrets{Secrets: make([]api.ClusterSecret, len(specs))}
	for i, sp := range specs {
		out.Secrets[i] = api.ClusterSecret(sp)
	}
	return out, err
}

// sandboxScoped reports whether the route pattern path belongs to one
// sandbox (/v1/sandboxes/{id} and below): the routes a Router routes.
// Snapshot, warm-template and template routes are the node's own.
func sandboxScoped(path string) bool {
	return path == "/v1/sandboxes/{id}" || strings.HasPrefix(path, "/v1/sandboxes/{id}/")
}

// route hands r, a request of the route pattern path, to the Router when
// the route is sandbox-scoped: true when another node answered it.
func (s *Server) route(w http.ResponseWriter, r *http.Request, path string) (bool, error) {
	if s.router == nil || !sandboxScoped(path) {
		return false, nil
	}
	ref := r.PathValue("id")
	if err := api.CheckRef(ref); err != nil {
		return false, err
	}
	return s.router.Route(w, r, ref)
}
