package clusterproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Headers of a request one node forwards to another. The receiving node
// trusts them only when the request carries the cluster token (Peer);
// they are removed from every other request.
const (
	// HeaderCaller is the api.Caller ID of the original request (e.g.
	// "token", "tls:CN"), for the owner's audit log.
	HeaderCaller = "X-Agentbox-Caller"
	// HeaderTenant is the name of the original request's tenant (serve
	// --tenants); absent without tenants.
	HeaderTenant = "X-Agentbox-Tenant"
	// HeaderForwardedBy names the node that forwarded the request: the
	// loop guard. A request that carries it (with the cluster token) is
	// served where it arrives, never forwarded again.
	HeaderForwardedBy = "X-Agentbox-Forwarded-By"
)

// identityHeaders are the headers only a node with the cluster token may
// set.
var identityHeaders = []string{HeaderCaller, HeaderTenant, HeaderForwardedBy}

// ErrNodeUnreachable is the error of a request for a sandbox whose node
// does not answer: no heartbeat within the cluster's expiry, no member of
// the cluster any more, or its API cannot be dialled. The API answers it
// 503 node_unreachable.
var ErrNodeUnreachable = errdefs.New(errdefs.ErrUnavailable, api.CodeNodeUnreachable, "node unreachable")

// Defaults of Config's durations.
const (
	// DefaultDialTimeout bounds the connection to another node (TCP and
	// TLS handshakes), so a request for a sandbox on a dead node fails
	// within it instead of hanging.
	DefaultDialTimeout = 2 * time.Second
	// DefaultListTimeout bounds the answer of each other node to a list.
	DefaultListTimeout = 10 * time.Second
)

// Config configures a Proxy.
type Config struct {
	// Directory finds the node of a sandbox. Required.
	Directory cluster.Directory
	// Nodes gives the other nodes' state and advertised URL, and this
	// node's name (Self). Required.
	Nodes cluster.Nodes
	// Token is the cluster token every node shares (serve
	// --cluster-token-file): sent as "Authorization: Bearer" with every
	// forwarded request. The receiving node's keyring (vmctl/auth,
	// auth.Config.Peer: the same token) accepts it; Peer believes what
	// such a request says. Surrounding white space is ignored; at least
	// apiserver.MinTokenBytes long. Required.
	Token string
	// TLS configures the connections to nodes advertised at https:// URLs
	// (e.g. RootCAs with the cluster's CA, a client certificate); nil:
	// the system's roots.
	TLS *tls.Config
	// Local reports whether this node's own daemon has the sandbox ref
	// (an ID or a name): such a request is served here without a
	// directory lookup, a NATS round trip on every exec, stdin write or
	// file call otherwise. nil: always ask the directory.
	Local func(ref string) bool
	// TenantOf returns the name of the tenant of ctx's request (what
	// tenant.From finds), or "" when the caller may see every sandbox (no
	// tenants configured). nil: always "". A sandbox of another tenant is
	// never forwarded (the local lookup answers 404).
	TenantOf func(ctx context.Context) string
	// WithTenant returns ctx carrying the tenant named name, which the
	// forwarding node vouched for (a lookup in this node's tenants, then
	// tenant.With); an error when this node does not know it. nil: a
	// forwarded request with a tenant is refused (this node has no
	// tenants, the sender has).
	WithTenant func(ctx context.Context, name string) (context.Context, error)
	// Secrets, if set, is this node's store of the secrets of creates
	// queued here (cluster.Node): CreateSecrets hands them to the peer
	// that took a create (secrets.go). nil: every fetch is refused.
	Secrets SecretsHolder
	// Logger receives warnings (a directory that cannot be read, a node
	// missing from a list); nil discards them.
	Logger *slog.Logger
	// DialTimeout bounds connecting to another node; 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// ListTimeout bounds each other node's answer to a list; 0 means
	// DefaultListTimeout.
	ListTimeout time.Duration
}

// Proxy routes sandbox requests between the nodes of a cluster: the
// apiserver.Router of a clustered daemon. It is safe for concurrent use.
type Proxy struct {
	dir        cluster.Directory
	nodes      cluster.Nodes
	token      string
	local      func(string) bool
	tenantOf   func(context.Context) string
	withTenant func(context.Context, string) (context.Context, error)
	secrets    SecretsHolder
	log        *slog.Logger
	listTO     time.Duration
	tr         *http.Transport
	rp         *httputil.ReverseProxy
}

var _ apiserver.Router = (*Proxy)(nil)

// New checks cfg and returns a Proxy. Errors: no Directory or Nodes, a
// Token missing, too short or with white space inside.
func New(cfg Config) (*Proxy, error) {
	if cfg.Directory == nil || cfg.Nodes == nil {
		return nil, errors.New("clusterproxy: Config.Directory and Config.Nodes are required")
	}
	token := strings.TrimSpace(cfg.Token)
	if len(token) < apiserver.MinTokenBytes {
		return nil, fmt.Errorf("the cluster token is %d bytes long: give every node the same --cluster-token-file holding at least %d random bytes, e.g. the output of `openssl rand -hex 32`", len(token), apiserver.MinTokenBytes)
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return nil, errors.New("the cluster token contains white space: use one word, e.g. the output of `openssl rand -hex 32`")
	}
	p := &Proxy{
		dir:        cfg.Directory,
		nodes:      cfg.Nodes,
		token:      token,
		local:      cfg.Local,
		tenantOf:   cfg.TenantOf,
		withTenant: cfg.WithTenant,
		secrets:    cfg.Secrets,
		log:        cfg.Logger,
		listTO:     cfg.ListTimeout,
	}
	if p.tenantOf == nil {
		p.tenantOf = func(context.Context) string { return "" }
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.listTO == 0 {
		p.listTO = DefaultListTimeout
	}
	dialTO := cfg.DialTimeout
	if dialTO == 0 {
		dialTO = DefaultDialTimeout
	}
	p.tr = newTransport(cfg.TLS, dialTO)
	p.rp = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: p.tr,
		// Every write is flushed at once: exec output, watch events and
		// downloads reach the client as the owner sends them.
		FlushInterval: -1,
		ErrorHandler:  proxyError,
		ErrorLog:      slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	return p, nil
}

// newTransport is the transport of node-to-node requests: tlsCfg (nil:
// the system's roots) for https:// nodes, connecting within dialTO.
func newTransport(tlsCfg *tls.Config, dialTO time.Duration) *http.Transport {
	tr := &http.Transport{
		// Node to node, never through an environment's HTTP proxy.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: dialTO, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: dialTO,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	if tlsCfg != nil {
		tr.TLSClientConfig = tlsCfg.Clone()
	}
	return tr
}

// Close closes the idle connections to other nodes.
func (p *Proxy) Close() error {
	p.tr.CloseIdleConnections()
	return nil
}

// forwardedKey carries, in a request's context, the node that forwarded
// it (HeaderForwardedBy, trusted).
type forwardedKey struct{}

// forwarded reports whether ctx is a request another node forwarded.
func forwarded(ctx context.Context) bool {
	by, _ := ctx.Value(forwardedKey{}).(string)
	return by != ""
}

// Peer implements apiserver.Router: r is a peer's when the server's
// keyring found the cluster token on it (peer); then its identity headers
// are believed, else removed.
func (p *Proxy) Peer(r *http.Request, peer bool) (context.Context, error) {
	if !peer {
		for _, k := range identityHeaders {
			r.Header.Del(k)
		}
		return nil, nil
	}
	caller := r.Header.Get(HeaderCaller)
	if caller == "" {
		caller = "cluster"
	}
	ctx := api.WithCaller(r.Context(), api.Caller{ID: caller})
	if t := r.Header.Get(HeaderTenant); t != "" {
		if p.withTenant == nil {
			return nil, api.Errorf(http.StatusForbidden, api.CodePermissionDenied,
				"node %s forwarded a request of tenant %q but this node has no tenants: give every node the same --tenants file", api.QuoteShort(r.Header.Get(HeaderForwardedBy)), t)
		}
		var err error
		if ctx, err = p.withTenant(ctx, t); err != nil {
			return nil, err
		}
	}
	if by := r.Header.Get(HeaderForwardedBy); by != "" {
		ctx = context.WithValue(ctx, forwardedKey{}, by) // also CreateSecrets' taker (secrets.go)
	}
	return ctx, nil
}

// Route implements apiserver.Router.
func (p *Proxy) Route(w http.ResponseWriter, r *http.Request, ref string) (bool, error) {
	ctx := r.Context()
	if forwarded(ctx) || (p.local != nil && p.local(ref)) {
		return false, nil // ids and names are cluster-unique: here is the owner
	}
	e, err := p.dir.Lookup(ctx, ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		// Without the directory (NATS down) each node still serves its
		// own sandboxes.
		p.log.Warn("cluster directory lookup failed: serving the request locally", "sandbox", ref, "err", err)
		return false, nil
	}
	if e.Node == p.nodes.Self() {
		return false, nil
	}
	if t := p.tenantOf(ctx); t != "" && e.Tenant != t {
		return false, nil // not the caller's: the local lookup answers 404
	}
	target, err := p.owner(ctx, ref, e)
	if err != nil {
		return false, err
	}
	out := &outcome{}
	ctx = context.WithValue(ctx, targetKey{}, target)
	ctx = context.WithValue(ctx, outcomeKey{}, out)
	// The owner may answer before the request body has all gone through
	// (a stream of stdin, an upload refused early): keep reading it while
	// the answer is written, or net/http drains it under the transport's
	// feet and the connection to the owner breaks mid-answer.
	_ = http.NewResponseController(w).EnableFullDuplex() // unsupported (HTTP/2): full duplex already
	p.rp.ServeHTTP(w, r.WithContext(ctx))
	if out.err != nil {
		if r.Context().Err() != nil {
			return true, fmt.Errorf("forwarding to node %s: %w", e.Node, r.Context().Err())
		}
		return false, unreachable(ref, e.Node, target.info, fmt.Sprintf("does not answer at %s (%v)", target.info.Advertise, out.err))
	}
	return true, nil
}

// target is where a request goes: the owner and its parsed URL.
type target struct {
	info cluster.NodeInfo
	url  *url.URL
}

type targetKey struct{}

// outcome records the error of a forward that got no answer.
type outcome struct{ err error }

type outcomeKey struct{}

// proxyError is the ReverseProxy's ErrorHandler: nothing was written;
// Route answers the error.
func proxyError(_ http.ResponseWriter, r *http.Request, err error) {
	if out, ok := r.Context().Value(outcomeKey{}).(*outcome); ok {
		out.err = err
	}
}

// owner returns where the sandbox of entry e (asked for as ref) lives, or
// the node_unreachable error of an owner known not to answer.
func (p *Proxy) owner(ctx context.Context, ref string, e cluster.Entry) (*target, error) {
	info, err := p.nodes.Node(ctx, e.Node)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, unreachable(ref, e.Node, cluster.NodeInfo{}, "is no member of the cluster any more (no heartbeat within the expiry)")
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s is on node %s, whose membership cannot be read: %w", ref, e.Node, err)
	}
	if info.State == cluster.NodeUnreachable {
		return nil, unreachable(ref, e.Node, info, fmt.Sprintf("has not been seen for %s", sinceText(info.LastSeen)))
	}
	u, err := url.Parse(info.Advertise)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, unreachable(ref, e.Node, info, fmt.Sprintf("advertises no usable URL (%q): start it with --advertise http(s)://HOST:PORT", info.Advertise))
	}
	return &target{info: info, url: &url.URL{Scheme: u.Scheme, Host: u.Host}}, nil
}

// unreachable is the node_unreachable error of sandbox ref on node, whose
// membership is info (zero when unknown); why ends "node NAME ...".
func unreachable(ref, node string, info cluster.NodeInfo, why string) error {
	details := map[string]any{"node": node}
	if !info.LastSeen.IsZero() {
		details["last_seen_seconds"] = int64(time.Since(info.LastSeen).Seconds())
	}
	return errdefs.WithDetails(ErrNodeUnreachable.WithMessage(
		fmt.Sprintf("sandbox %s is on node %s, which %s: retry when the node is back (agentbox nodes shows its state)", ref, node, why)), details)
}

// sinceText words the time since t in whole seconds ("17 s").
func sinceText(t time.Time) string {
	if t.IsZero() {
		return "a while"
	}
	return fmt.Sprintf("%d s", int64(time.Since(t).Round(time.Second).Seconds()))
}

// rewrite is the ReverseProxy's Rewrite: to the owner, authenticated with
// the cluster token, carrying the caller's identity and the loop guard.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(*target)
	pr.SetURL(t.url)
	pr.SetXForwarded()
	p.setIdentity(pr.In.Context(), pr.Out.Header)
}

// setIdentity sets the headers of a request this node forwards: the
// cluster token, the caller and tenant of ctx, and the loop guard.
func (p *Proxy) setIdentity(ctx context.Context, h http.Header) {
	for _, k := range identityHeaders {
		h.Del(k)
	}
	h.Set("Authorization", "Bearer "+p.token)
	h.Set(HeaderCaller, api.CallerFrom(ctx).ID)
	if t := p.tenantOf(ctx); t != "" {
		h.Set(HeaderTenant, t)
	}
	h.Set(HeaderForwardedBy, p.nodes.Self())
}
