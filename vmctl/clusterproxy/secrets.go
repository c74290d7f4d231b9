package clusterproxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// The secrets of a create queued at one node and taken by another go
// node to node over the API, never through NATS (vmctl/cluster,
// secrets.go): the taker's SecretsClient asks POST /v1/cluster/secrets
// at the create's origin with the cluster token and its own name
// (HeaderForwardedBy); the origin's Proxy.CreateSecrets answers a peer's
// request only, with what its node's TakeSecrets hands that node.

// SecretsHolder is the node's store of the secrets of creates queued
// there: cluster.Node.TakeSecrets.
type SecretsHolder interface {
	TakeSecrets(ctx context.Context, ref, node string) ([]api.SecretSpec, error)
}

// CreateSecrets implements apiserver.Router: the secrets of create, a
// create queued at this node, for the peer node ctx's request came from
// (Peer put its HeaderForwardedBy in the context: a peer's request). Errors: 403 permission_denied for a request without
// the cluster token or without a node name, or when this node holds no
// secrets (Config.Secrets nil); TakeSecrets' (403 not the taker, 404
// gone).
func (p *Proxy) CreateSecrets(ctx context.Context, create string) ([]api.SecretSpec, error) {
	node, _ := ctx.Value(forwardedKey{}).(string)
	if node == "" {
		return nil, errdefs.ErrPermissionDenied.WithMessage("only another node of the cluster (with the cluster token, naming itself in " + HeaderForwardedBy + ") fetches a queued create's secrets")
	}
	if p.secrets == nil {
		return nil, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("node %s holds no queued creates' secrets", p.nodes.Self()))
	}
	return p.secrets.TakeSecrets(ctx, create, node)
}

// MaxSecretsAnswerBytes bounds the answer of a secrets fetch: 32 secrets
// of 16 KiB with their hosts fit many times over.
const MaxSecretsAnswerBytes = 4 << 20

// SecretsConfig configures a SecretsClient.
type SecretsConfig struct {
	// Token is the cluster token (serve --cluster-token-file), as in
	// Config.Token. Required.
	Token string
	// Self is this node's name (serve --node), sent as HeaderForwardedBy:
	// the origin hands the secrets only to the node that took the create.
	// Required.
	Self string
	// TLS configures connections to https:// origins, as Config.TLS.
	TLS *tls.Config
	// AllowHTTP permits fetching from an origin advertised at http://
	// (serve --cluster-trusted-network): the values would cross the
	// network in clear. false: such a fetch is refused.
	AllowHTTP bool
	// DialTimeout bounds connecting to the origin; 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
}

// SecretsClient fetches queued creates' secrets from the nodes they came
// in at: its Fetch is cluster.Config.FetchSecrets.
type SecretsClient struct {
	cfg SecretsConfig
	hc  *http.Client
}

// NewSecretsClient returns the SecretsClient of cfg. Errors: no Token or
// Self.
func NewSecretsClient(cfg SecretsConfig) (*SecretsClient, error) {
	cfg.Token = strings.TrimSpace(cfg.Token)
	if cfg.Token == "" || cfg.Self == "" {
		return nil, fmt.Errorf("clusterproxy: SecretsConfig.Token and Self are required")
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	return &SecretsClient{cfg: cfg, hc: &http.Client{
		Transport:     limitedTransport{newTransport(cfg.TLS, cfg.DialTimeout), MaxSecretsAnswerBytes},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// Close closes the idle connections to other nodes.
func (c *SecretsClient) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// Fetch implements cluster.SecretsFetcher: POST /v1/cluster/secrets at
// origin's advertised URL, with the cluster token and this node's name.
// Errors: an http:// origin without AllowHTTP, a URL that is no http(s)
// URL, the origin's answer (403, 404, …), an answer over
// MaxSecretsAnswerBytes, the connection's.
func (c *SecretsClient) Fetch(ctx context.Context, origin cluster.NodeInfo, ref string) ([]api.SecretSpec, error) {
	u, err := url.Parse(origin.Advertise)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("node %s advertises no usable URL (%q)", origin.Name, origin.Advertise)
	}
	if u.Scheme == "http" && !c.cfg.AllowHTTP {
		return nil, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("node %s advertises http:// (%s): secrets cross the network only over https:// unless every node runs with --cluster-trusted-network", origin.Name, origin.Advertise))
	}
	h := http.Header{"User-Agent": {"agentbox-cluster"}, HeaderForwardedBy: {c.cfg.Self}}
	cl, err := client.NewTCP(strings.TrimSuffix(origin.Advertise, "/"), client.WithToken(c.cfg.Token), client.WithHeader(h), client.WithHTTPClient(c.hc))
	if err != nil {
		return nil, err
	}
	list, err := cl.ClusterSecrets(ctx, ref)
	if err != nil {
		return nil, err
	}
	out := make([]api.SecretSpec, len(list))
	for i, s := range list {
		out[i] = api.SecretSpec(s)
	}
	return out, nil
}

// limitedTransport fails a response body read past max bytes.
type limitedTransport struct {
	rt  http.RoundTripper
	max int64
}

func (t limitedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.max}
	return resp, nil
}

// limitedBody is a body that errors once more than left bytes came.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, fmt.Errorf("the answer is longer than %d bytes", MaxSecretsAnswerBytes)
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, fmt.Errorf("the answer is longer than %d bytes", MaxSecretsAnswerBytes)
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
