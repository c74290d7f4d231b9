package api

import "context"

// Caller identifies who sent a request, for the audit log and logs.
type Caller struct {
	// ID is "uid:N" for a unix socket peer (from SO_PEERCRED), "tls:CN"
	// for a TCP client with a verified certificate, "token" for a TCP
	// client with the bearer token, "tenant:NAME" for one with a tenant's
	// token (serve --tenants), "tcp:ADDR" for a TCP client over TLS
	// with neither, "unix:unknown" when the peer's credentials could not
	// be read; the daemon's own actions use "daemon".
	ID string
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the Caller in ctx, or Caller{ID: "unknown"} when ctx
// has none (a request served without WithCaller, e.g. through apiserver.Server.Handler).
func CallerFrom(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c
	}
	return Caller{ID: "unknown"}
}
