package apiserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// unixConnContext is http.Server.ConnContext for unix socket listeners: the
// peer's uid becomes the Caller of every request on the connection.
func unixConnContext(ctx context.Context, c net.Conn) context.Context {
	return api.WithCaller(ctx, api.Caller{ID: peerCaller(c)})
}

// peerCaller returns "uid:N" for the peer of a unix connection.
func peerCaller(c net.Conn) string {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return "unix:unknown"
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return "unix:unknown"
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return "unix:unknown"
	}
	return fmt.Sprintf("uid:%d", cred.Uid)
}

// tcpAuth wraps h for a TCP listener: the bearer token of every request
// ("Authorization: Bearer TOKEN") is checked against the keyring
// (vmctl/auth, Config.Keyring). With a token or tenants configured a
// request needs one (401 unauthorized otherwise, worded by auth): the
// daemon's token (the admin, Caller "token") or a tenant's (Config.Tenants:
// the request acts for that tenant, whatever else it carries — its
// context gets tenant.With, Caller "tenant:NAME"). The cluster peers'
// token makes the request another node's forward, whose identity headers
// the Router believes (Router.Peer). A verified client certificate names
// the caller "tls:CN" instead; with neither token nor tenants the Caller
// is "tcp:ADDR". No header a client sends names a tenant: only the token
// does.
func (s *Server) tcpAuth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, authErr := s.keys.CheckRequest(r, auth.Bearer)
		if s.router != nil {
			// Another cluster node's forward (cluster.go): its identity
			// headers are trusted only with the cluster's credentials.
			peer := id.Kind == auth.Peer
			ctx, err := s.router.Peer(r, peer)
			if err != nil {
				s.serveError(w, r, "unauthenticated", err)
				return
			}
			if peer {
				h.ServeHTTP(w, r.WithContext(ctx))
				return
			}
		}
		caller := "tcp:" + r.RemoteAddr
		var who *tenant.Tenant
		if s.keys.RequiresSecret() {
			if authErr != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="agentbox"`)
				s.serveError(w, r, "unauthenticated", authErr)
				return
			}
			caller = "token"
			if id.Kind == auth.Tenant {
				who = id.Tenant
				caller = "tenant:" + who.Name
			}
		}
		if cn, ok := clientCN(r.TLS); ok && who == nil {
			caller = "tls:" + cn
		}
		ctx := api.WithCaller(r.Context(), api.Caller{ID: caller})
		// Set either way: nothing from before the auth may name a tenant.
		ctx = tenant.With(ctx, who)
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// clientCN returns the common name of a verified TLS client certificate.
func clientCN(cs *tls.ConnectionState) (string, bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", false
	}
	return cs.VerifiedChains[0][0].Subject.CommonName, true
}
