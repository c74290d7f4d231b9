// Package auth is the one secret check of every front of the daemon: the
// REST API on TCP (and MCP over HTTP at /mcp behind it), the E2B control
// plane and the requests cluster peers forward to each other. A Keyring
// holds the secrets the daemon accepts — the admin's token (serve
// --token-file), the tenants' tokens (serve --tenants, vmctl/tenant) and
// the cluster peers' shared token (serve --cluster-token-file) — and Check
// says whose a secret is. Every front answers a refused secret with the
// same two errors, ErrMissing and ErrWrong (errdefs.ErrUnauthenticated:
// 401 unauthorized through api.ErrorFrom), worded once here; a Scheme
// reads the secret from a request the way a front's clients send it.
//
// Secrets are kept as SHA-256 digests and compared in constant time:
// both sides are hashed (so the compare takes the same time whatever
// the secret's length) and compared with subtle.ConstantTimeCompare
// against every candidate, without stopping at the first match (so the
// time taken says nothing about which candidate, if any, matched).
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// Kind says whose a secret is.
type Kind int

// The kinds of Identity. The zero Kind is no identity (a refused secret).
const (
	// Admin is the daemon's own token (serve --token-file): the caller
	// sees and may do everything.
	Admin Kind = iota + 1
	// Tenant is a tenant's token (serve --tenants): the caller acts for
	// that tenant (Identity.Tenant), within its sandboxes and quotas.
	Tenant
	// Peer is the cluster's token (serve --cluster-token-file): the
	// caller is another node of the cluster forwarding a request, and
	// vouches for its original caller (vmctl/clusterproxy).
	Peer
)

// String returns "admin", "tenant", "peer", or "none" for the zero Kind.
func (k Kind) String() string {
	switch k {
	case Admin:
		return "admin"
	case Tenant:
		return "tenant"
	case Peer:
		return "peer"
	}
	return "none"
}

// Identity is whom a secret proved the caller to be.
type Identity struct {
	// Kind is whose the secret is; 0 when Check refused it.
	Kind Kind
	// Tenant is the tenant of a Tenant secret, nil for any other kind.
	Tenant *tenant.Tenant
}

// The two errors of a refused secret, of category
// errdefs.ErrUnauthenticated (401 unauthorized on every front). Check and
// CheckRequest return them with a message that says how to send the
// right secret (errors.Is matches these sentinels).
var (
	// ErrMissing: the request carries no secret.
	ErrMissing = errdefs.New(errdefs.ErrUnauthenticated, "", "missing token")
	// ErrWrong: the request carries a secret that is none of the
	// keyring's (or one whose kind the front does not take).
	ErrWrong = errdefs.New(errdefs.ErrUnauthenticated, "", "wrong token")
)

// Config is what a Keyring holds. Every field is optional.
type Config struct {
	// Admin is the daemon's token (serve --token-file); surrounding white
	// space (a token file's newline) is ignored; "" is no admin token.
	// Its length and form are the front's to check
	// (apiserver.MinTokenBytes).
	Admin string
	// Tenants are the tenants whose tokens the keyring accepts (serve
	// --tenants); nil is none.
	Tenants *tenant.Registry
	// Peer is the token the nodes of a cluster send each other (serve
	// --cluster-token-file); surrounding white space is ignored; "" is no
	// cluster.
	Peer string
}

// secret is one secret of the keyring: its SHA-256, and whether it is set
// at all (an unset secret matches nothing, not even "").
type secret struct {
	sum [sha256.Size]byte
	set bool
}

// newSecret returns the secret s, white space around it removed.
func newSecret(s string) secret {
	s = strings.TrimSpace(s)
	return secret{sum: sha256.Sum256([]byte(s)), set: s != ""}
}

// matches reports, in constant time, whether sum is the digest of the
// secret; an unset secret never matches.
func (s secret) matches(sum [sha256.Size]byte) bool {
	eq := subtle.ConstantTimeCompare(sum[:], s.sum[:]) == 1
	return eq && s.set
}

// Keyring holds the secrets a daemon accepts: the admin's, the tenants',
// the cluster peers'. It keeps only their SHA-256 digests, never changes
// after New, and is safe for concurrent use. A nil *Keyring is the empty
// keyring.
type Keyring struct {
	admin   secret
	peer    secret
	tenants *tenant.Registry
}

// New returns the keyring of cfg.
func New(cfg Config) *Keyring {
	return &Keyring{admin: newSecret(cfg.Admin), peer: newSecret(cfg.Peer), tenants: cfg.Tenants}
}

// RequiresSecret reports whether a front must refuse a request that
// carries neither the admin's nor a tenant's secret: the keyring has an
// admin token or tenants. A keyring with the cluster peers' secret alone
// requires none: a TCP listener with TLS and no token serves whoever it
// lets connect, as without a cluster, and only a peer's forward is told
// apart.
func (k *Keyring) RequiresSecret() bool {
	return k != nil && (k.admin.set || k.tenants != nil)
}

// HasPeer reports whether the keyring holds the cluster peers' secret.
func (k *Keyring) HasPeer() bool { return k != nil && k.peer.set }

// Tenants returns the tenants of the keyring (Config.Tenants), nil
// without.
func (k *Keyring) Tenants() *tenant.Registry {
	if k == nil {
		return nil
	}
	return k.tenants
}

// Holds reports whether k's admin token is admin (white space around it
// ignored; "" is none) and its tenants are tenants: whether k was made
// of them, for a front given both a keyring and those settings.
func (k *Keyring) Holds(admin string, tenants *tenant.Registry) bool {
	if k == nil {
		k = &Keyring{}
	}
	a := newSecret(admin)
	return a.set == k.admin.set && (!a.set || a.matches(k.admin.sum)) && k.tenants == tenants
}

// Check returns whose secret is (white space around it ignored): Admin,
// Tenant (with its tenant) or Peer. The secret is compared with every
// secret of the keyring, each in constant time, before the answer is
// chosen; should it match several (a cluster token reused as the admin's),
// Peer wins over Admin and Admin over Tenant. Errors: ErrMissing for ""
// and ErrWrong for a secret the keyring does not hold (an empty keyring
// holds none), their text saying how to send the right one as
// "Authorization: Bearer TOKEN" (CheckRequest words them for its
// front's Scheme).
func (k *Keyring) Check(secret string) (Identity, error) {
	return k.check(secret, Bearer)
}

// check is Check for scheme s: the kinds s takes, its wording.
func (k *Keyring) check(secret string, s Scheme) (Identity, error) {
	secret = strings.TrimSpace(secret)
	if k == nil {
		k = &Keyring{}
	}
	sum := sha256.Sum256([]byte(secret))
	// Every compare runs, whichever matches.
	admin := k.admin.matches(sum)
	peer := k.peer.matches(sum)
	who, isTenant := k.tenants.Lookup(secret)
	switch {
	case secret == "":
		return Identity{}, ErrMissing.WithMessage(k.refusal("missing", s))
	case peer && s.peers:
		return Identity{Kind: Peer}, nil
	case admin:
		return Identity{Kind: Admin}, nil
	case isTenant:
		return Identity{Kind: Tenant, Tenant: who}, nil
	}
	return Identity{}, ErrWrong.WithMessage(k.refusal("wrong", s))
}

// refusal is the one wording of a refused secret: "missing token: ..." or
// "wrong token: ...", saying whose token to send (the tenant's, when the
// keyring has tenants) and how (s.how).
func (k *Keyring) refusal(what string, s Scheme) string {
	whose := "the token of the agentbox daemon's --token-file"
	if k.tenants != nil {
		whose = "your tenant's token (or the agentbox daemon's --token-file)"
	}
	return what + " token: send " + whose + " as " + s.how
}

// Scheme is how a front's clients send their secret: the header it is
// read from, the kinds of secret the front takes, and how the error
// messages tell a client to send it.
type Scheme struct {
	header string // the request header
	bearer bool   // the header is "Bearer TOKEN" (any case of "Bearer")
	peers  bool   // a Peer secret is taken
	how    string // how to send it, for the messages
}

// The schemes of the daemon's fronts.
var (
	// Bearer is "Authorization: Bearer TOKEN" (the scheme name in any
	// case): the REST API on TCP, MCP over HTTP behind it, and the
	// cluster peers' forwards. It takes every kind.
	Bearer = Scheme{header: "Authorization", bearer: true, peers: true, how: `"Authorization: Bearer TOKEN"`}
	// APIKey is E2B's "X-API-KEY: TOKEN" (the SDK's E2B_API_KEY): the E2B
	// control plane (vmctl/e2b). It takes Admin and Tenant: the cluster's
	// peers talk REST only, so their token is a wrong one here.
	APIKey = Scheme{header: "X-API-KEY", how: "E2B_API_KEY (the X-API-KEY header)"}
)

// Secret returns the secret r carries in s's header, "" when it carries
// none (for Bearer, also an Authorization header of another scheme).
func (s Scheme) Secret(r *http.Request) string {
	h := r.Header.Get(s.header)
	if !s.bearer {
		return strings.TrimSpace(h)
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// CheckRequest returns whose the secret r carries in s's header is
// (Check, for the kinds s takes only), its errors worded for s's clients.
func (k *Keyring) CheckRequest(r *http.Request, s Scheme) (Identity, error) {
	return k.check(s.Secret(r), s)
}
