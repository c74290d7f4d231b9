package envd

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

// rpcUser is the guest user of a Connect request: the name of the
// "Authorization: Basic base64(NAME:)" header the SDK sends (envd's
// convention: a username, no password), else def (the SDK sends none
// from envd 0.4.0 on). A malformed header is unauthenticated, as envd
// answers it.
func rpcUser(h http.Header, def string) (string, error) {
	v := h.Get("Authorization")
	if v == "" {
		return def, nil
	}
	scheme, enc, _ := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "Basic") { // schemes are case-insensitive (RFC 9110)
		return "", connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("authorization header %s is not Basic: send Basic base64(USER:)", api.QuoteShort(v)))
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("authorization header: %w", err))
	}
	name, _, _ := strings.Cut(string(b), ":")
	if name == "" {
		return def, nil
	}
	if err := api.CheckOwner("user", name); err != nil {
		return "", connect.NewError(connect.CodeUnauthenticated, err)
	}
	return name, nil
}

// resolver turns the paths of one request into absolute guest paths as
// envd does (permissions.ExpandAndResolve): "~" and "~/x" are the user's
// home, a relative path is relative to it, an absolute one is cleaned.
// The home comes from the guest's /etc/passwd, read through the sandbox
// service the first time a request needs it.
type resolver struct {
	c    *client.Client
	sb   string
	user string
	home string
}

// homeOf reads user's home directory from the guest's /etc/passwd.
func homeOf(ctx context.Context, c *client.Client, sb, user string) (string, error) {
	var buf bytes.Buffer
	if _, err := c.DownloadTo(ctx, sb, "/etc/passwd", func(api.FileInfo) io.Writer { return &limitWriter{w: &buf, n: 4 << 20} }); err != nil {
		return "", fmt.Errorf("reading the guest's /etc/passwd for the home of %s: %w", user, err)
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 7 && (f[0] == user || f[2] == user) && path.IsAbs(f[5]) {
			return path.Clean(f[5]), nil
		}
	}
	return "", api.Invalidf("user %s has no account in the guest's /etc/passwd: give an absolute path, or a user that exists", api.QuoteShort(user))
}

// abs resolves p.
func (r *resolver) abs(ctx context.Context, p string) (string, error) {
	if p == "" {
		return "", api.Invalidf("path is missing: give a guest path (absolute, or relative to the user's home)")
	}
	if strings.HasPrefix(p, "~") && len(p) > 1 && p[1] != '/' {
		return "", api.Invalidf("path %s: cannot expand another user's home (~NAME): give an absolute path", api.QuoteShort(p))
	}
	if strings.HasPrefix(p, "/") {
		return path.Clean(p), nil
	}
	if r.home == "" {
		h, err := homeOf(ctx, r.c, r.sb, r.user)
		if err != nil {
			return "", err
		}
		r.home = h
	}
	return path.Join(r.home, strings.TrimPrefix(p, "~")), nil
}

// limitWriter fails a write past n bytes (a passwd file is small; a huge
// one is refused, not held in memory).
type limitWriter struct {
	w io.Writer
	n int64
}

// Write implements io.Writer: p, or an error once more than n bytes came.
func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, fmt.Errorf("the guest's /etc/passwd is over 4 MiB")
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}
