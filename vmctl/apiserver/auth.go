package apiserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/api"
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

// tcpAuth wraps h for a TCP listener: with a token or tenants configured
// every request needs "Authorization: Bearer TOKEN" (401 unauthorized
// otherwise): the daemon's token (the admin, Caller "token") or a
// tenant's (Config.Tenants: the request acts for that tenant, whatever
// else it carries — its context gets tenant.With, Caller "tenant:NAME").
// A verified client certificate names the caller "tls:CN" instead; with
// neither token nor tenants the Caller is "tcp:ADDR". No header a client
// sends names a tenant: only the token does.
func (s *Server) tcpAuth(h http.Handler) http.Handler {
	var want [32]byte
	if s.token != "" {
		want = sha256.Sum256([]byte(s.token))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.router != nil {
			// Another cluster node's forward (cluster.go): its identity
			// headers are trusted only with the cluster's credentials.
			ctx, peer, err := s.router.Peer(r)
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
		if s.token != "" || s.tenants != nil {
			got, ok := bearer(r.Header.Get("Authorization"))
			// Hashing first makes the compare constant-time in the
			// token's length too.
			sum := sha256.Sum256([]byte(got))
			admin := ok && s.token != "" && subtle.ConstantTimeCompare(sum[:], want[:]) == 1
			var isTenant bool
			if ok && !admin {
				who, isTenant = s.tenants.Lookup(got)
			}
			if !admin && !isTenant {
				w.Header().Set("WWW-Authenticate", `Bearer realm="agentbox"`)
				msg := "missing bearer token: send \"Authorization: Bearer TOKEN\" with the token of the daemon's --token-file"
				if s.tenants != nil {
					msg = "missing bearer token: send \"Authorization: Bearer TOKEN\" with your tenant's token (or the daemon's --token-file)"
				}
				if ok {
					msg = "wrong bearer token: send the token of the daemon's --token-file"
					if s.tenants != nil {
						msg = "wrong bearer token: send your tenant's token (or the daemon's --token-file)"
					}
				}
				s.serveError(w, r, "unauthenticated", api.Errorf(http.StatusUnauthorized, api.CodeUnauthorized, "%s", msg))
				return
			}
			caller = "token"
			if isTenant {
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

// bearer extracts the token of an "Authorization: Bearer TOKEN" header.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// clientCN returns the common name of a verified TLS client certificate.
func clientCN(cs *tls.ConnectionState) (string, bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", false
	}
	return cs.VerifiedChains[0][0].Subject.CommonName, true
}
