package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
)

// ErrUnreachable is wrapped (with %w, next to the dial error, so
// errors.Is also finds syscall.ECONNREFUSED or fs.ErrNotExist) by every
// error of a request whose connection could not be made because nothing
// listens: the socket file is missing (ENOENT) or nobody accepts on it or
// on the TCP port (ECONNREFUSED). Other dial failures (EACCES on the
// socket, DNS, TLS) are not ErrUnreachable: a daemon may be there.
//
// It is the one sentinel of vmctl/ without an errdefs category, on
// purpose: a front that answers a client error (MCP's tools through
// api.ErrorFrom) answers today the missing socket 404 not_found (its
// fs.ErrNotExist) and the refused connection 500 internal; any category
// would answer both the same.
var ErrUnreachable = errors.New("agentbox daemon not reachable")

// Client talks to one agentbox daemon. It is safe for concurrent use; its
// connections are kept alive between requests.
//
// Its calls are declared by resource on the unexported types it embeds
// (sandboxes, processes, files, snapshots, templates, ports, daemon),
// which all share its one transport; they are called on the Client.
type Client struct {
	*transport
	sandboxes
	processes
	files
	snapshots
	templates
	ports
	daemon
}

// transport is what every call of a Client goes through: where the
// daemon is, the connections, the credentials and headers of a request,
// and the one turning of error answers into errors (decodeError).
type transport struct {
	hc    *http.Client
	base  url.URL
	token string
	// extra is WithHeader's, set on every request after the client's own.
	extra http.Header
	// resume asks routes that can resume a paused sandbox to (Resuming).
	resume bool
}

// newClient returns the Client whose calls all go through t.
func newClient(t *transport) *Client {
	return &Client{
		transport: t,
		sandboxes: sandboxes{t},
		processes: processes{t},
		files:     files{t},
		snapshots: snapshots{t},
		templates: templates{t},
		ports:     ports{t},
		daemon:    daemon{t},
	}
}

// Option configures a Client.
type Option func(*options)

type options struct {
	token  string
	tls    *tls.Config
	hc     *http.Client
	header http.Header
}

// WithToken sends "Authorization: Bearer tok" with every request (what a
// daemon's TCP listener demands).
func WithToken(tok string) Option { return func(o *options) { o.token = tok } }

// WithTLSConfig sets the TLS configuration of an https:// NewTCP client
// (e.g. a RootCAs pool with the daemon's CA, or a client certificate).
func WithTLSConfig(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithHTTPClient replaces the http.Client: its Transport then decides where
// requests go (New's socket path and WithTLSConfig are not used).
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.hc = hc } }

// WithHeader sends h's fields with every request (REST calls and the
// WebSocket of an interactive exec), set after the client's own: a
// "User-Agent" or "Authorization" in h replaces the client's
// "agentbox-client" and WithToken's bearer token. E.g. the cluster token
// and identity headers a node sends another (vmctl/clusterproxy). h is
// copied; later changes to it are not seen.
func WithHeader(h http.Header) Option { return func(o *options) { o.header = h.Clone() } }

// New returns a client of the daemon listening on the unix socket
// socketPath. Nothing is dialed yet: the first request does, and fails
// with ErrUnreachable when no daemon is there.
func New(socketPath string, opts ...Option) *Client {
	o := applyOptions(opts)
	hc := o.hc
	if hc == nil {
		tr := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				c, err := d.DialContext(ctx, "unix", socketPath)
				if err != nil {
					return nil, dialError(err, socketPath)
				}
				return c, nil
			},
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}
		hc = &http.Client{Transport: tr}
	}
	return newClient(&transport{hc: hc, base: url.URL{Scheme: "http", Host: "agentbox"}, token: o.token, extra: o.header})
}

// NewTCP returns a client of the daemon at baseURL, "http://host:port" or
// "https://host:port" (no path). Errors: a malformed URL.
func NewTCP(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("daemon URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("daemon URL %q: want http://HOST:PORT or https://HOST:PORT", baseURL)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("daemon URL %q: want only a scheme, host and port, e.g. https://build1:7070", baseURL)
	}
	o := applyOptions(opts)
	hc := o.hc
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DisableCompression = true
		if o.tls != nil {
			tr.TLSClientConfig = o.tls.Clone()
		}
		dial := tr.DialContext
		addr := u.Host
		tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
			c, err := dial(ctx, network, a)
			if err != nil {
				return nil, dialError(err, addr)
			}
			return c, nil
		}
		hc = &http.Client{Transport: tr}
	}
	return newClient(&transport{hc: hc, base: url.URL{Scheme: u.Scheme, Host: u.Host}, token: o.token, extra: o.header}), nil
}

func applyOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// dialError wraps a dial failure that means "nobody there" with
// ErrUnreachable.
func dialError(err error, where string) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w at %s: %w", ErrUnreachable, where, err)
	}
	return err
}

// Close closes the client's idle connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// endpoint returns the URL of the path segments (each escaped) and query.
func (c *transport) endpoint(q url.Values, segs ...string) *url.URL {
	u := c.base
	var p, raw strings.Builder
	for _, s := range segs {
		p.WriteString("/" + s)
		raw.WriteString("/" + url.PathEscape(s))
	}
	u.Path, u.RawPath = p.String(), raw.String()
	if q != nil {
		u.RawQuery = q.Encode()
	}
	return &u
}

// header returns the headers every request carries: the User-Agent and,
// with a token, its Authorization.
func (c *transport) header() http.Header {
	h := http.Header{"User-Agent": {"agentbox-client"}}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	for k, vs := range c.extra {
		h[k] = slices.Clone(vs)
	}
	return h
}

// do sends a request and returns the response of a 2xx answer; any other
// answer becomes its *api.Error. contentType may be "" (no body).
func (c *transport) do(ctx context.Context, method string, u *url.URL, contentType string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header = c.header()
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s %s: %w", method, u.Path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// decodeError turns an error answer into an *api.Error with its status.
func decodeError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var er api.ErrorResponse
	if err := json.Unmarshal(body, &er); err == nil && er.Error.Code != "" {
		e := er.Error
		e.Status = resp.StatusCode
		return &e
	}
	snippet := strings.TrimSpace(string(body))
	if len(snippet) > 200 {
		snippet = snippet[:200] + "..."
	}
	return &api.Error{
		Status:  resp.StatusCode,
		Code:    api.CodeOf(resp.StatusCode),
		Message: fmt.Sprintf("the daemon answered %s: %s", resp.Status, snippet),
	}
}

// streamError is the *api.Error of an "error" event (its status from its
// code, as none travels in a stream).
func streamError(e *api.Error, what string) error {
	if e == nil {
		return &api.Error{Status: 500, Code: api.CodeInternal, Message: what + " ended with an error event without error"}
	}
	out := *e
	out.Status = api.StatusOf(e.Code)
	return &out
}

// call sends in (if not nil) as JSON and decodes the answer into out (if
// not nil).
func (c *transport) call(ctx context.Context, method string, u *url.URL, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), api.ContentTypeJSON
	}
	resp, err := c.do(ctx, method, u, ct, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, u.Path, err)
	}
	return nil
}

// checkType fails unless resp's Content-Type is want.
func checkType(resp *http.Response, want string) error {
	got := resp.Header.Get("Content-Type")
	if mt, _, _ := strings.Cut(got, ";"); strings.TrimSpace(mt) != want {
		return fmt.Errorf("%s %s: the daemon answered Content-Type %q, want %s", resp.Request.Method, resp.Request.URL.Path, got, want)
	}
	return nil
}
