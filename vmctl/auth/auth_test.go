package auth_test

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

const (
	adminToken = "admin-token-0123456789abcdef"
	peerToken  = "peer-token-0123456789abcdef"
	acmeToken  = "acme-token-0123456789abcdef"
	otherToken = "other-token-0123456789abcdef"
)

// tenants returns a registry of tenants acme and other.
func tenants(t *testing.T) *tenant.Registry {
	t.Helper()
	reg, err := tenant.NewRegistry(
		[]*tenant.Tenant{{Name: "acme"}, {Name: "other"}},
		[][sha256.Size]byte{sha256.Sum256([]byte(acmeToken)), sha256.Sum256([]byte(otherToken))})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// full returns a keyring with an admin token, two tenants and a peer
// token, as serve --token-file --tenants --cluster-token-file makes it
// (the files' newlines included).
func full(t *testing.T) *auth.Keyring {
	return auth.New(auth.Config{Admin: adminToken + "\n", Tenants: tenants(t), Peer: peerToken + "\n"})
}

// wantRefused fails unless err is sentinel, of category unauthenticated,
// answered 401 unauthorized by the API's one error table, with a message
// that starts with prefix.
func wantRefused(t *testing.T, what string, id auth.Identity, err, sentinel error, prefix string) {
	t.Helper()
	if id != (auth.Identity{}) {
		t.Errorf("%s: identity %+v, want none", what, id)
	}
	if !errors.Is(err, sentinel) || !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("%s: err = %v, want %v (unauthenticated)", what, err, sentinel)
	}
	if ae := api.ErrorFrom(err); ae.Status != http.StatusUnauthorized || ae.Code != api.CodeUnauthorized {
		t.Errorf("%s: answered %d %s, want 401 %s", what, ae.Status, ae.Code, api.CodeUnauthorized)
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("%s: message %q, want it to start with %q", what, err, prefix)
	}
}

// TestAdmin: the admin token is Admin, white space around it ignored.
func TestAdmin(t *testing.T) {
	k := full(t)
	for _, s := range []string{adminToken, " " + adminToken + "\n"} {
		id, err := k.Check(s)
		if err != nil || id.Kind != auth.Admin || id.Tenant != nil {
			t.Errorf("Check(%q) = %+v, %v; want admin", s, id, err)
		}
	}
	// Without tenants or peers too.
	if id, err := auth.New(auth.Config{Admin: adminToken}).Check(adminToken); err != nil || id.Kind != auth.Admin {
		t.Errorf("admin-only keyring: %+v, %v", id, err)
	}
}

// TestTenant: a tenant's token is that tenant, never the admin nor a
// peer, on either scheme.
func TestTenant(t *testing.T) {
	k := full(t)
	for tok, name := range map[string]string{acmeToken: "acme", otherToken: "other"} {
		id, err := k.Check(tok)
		if err != nil || id.Kind != auth.Tenant || id.Tenant == nil || id.Tenant.Name != name {
			t.Errorf("Check(%s's token) = %+v, %v; want tenant %s", name, id, err, name)
		}
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-KEY", tok)
		if id, err := k.CheckRequest(r, auth.APIKey); err != nil || id.Kind != auth.Tenant || id.Tenant.Name != name {
			t.Errorf("X-API-KEY %s's token = %+v, %v; want tenant %s", name, id, err, name)
		}
	}
	// A keyring of tenants only: the tenant, and no admin token to guess.
	k = auth.New(auth.Config{Tenants: tenants(t)})
	if id, err := k.Check(acmeToken); err != nil || id.Kind != auth.Tenant {
		t.Errorf("tenants-only keyring: %+v, %v", id, err)
	}
	id, err := k.Check(adminToken)
	wantRefused(t, "admin token without an admin", id, err, auth.ErrWrong, "wrong token: send your tenant's token (or the agentbox daemon's --token-file) as ")
}

// TestPeer: the cluster token is Peer on the Bearer scheme (also when it
// is the admin's too), and a wrong token on E2B's, which the cluster's
// peers never call.
func TestPeer(t *testing.T) {
	k := full(t)
	r, _ := http.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+peerToken)
	if id, err := k.CheckRequest(r, auth.Bearer); err != nil || id.Kind != auth.Peer || id.Tenant != nil {
		t.Errorf("bearer peer token = %+v, %v; want peer", id, err)
	}
	if id, err := k.Check(peerToken); err != nil || id.Kind != auth.Peer {
		t.Errorf("Check(peer token) = %+v, %v; want peer", id, err)
	}
	r.Header.Set("X-API-KEY", peerToken)
	id, err := k.CheckRequest(r, auth.APIKey)
	wantRefused(t, "peer token as X-API-KEY", id, err, auth.ErrWrong, "wrong token: ")

	// One token for both: a peer on REST, the admin on E2B.
	k = auth.New(auth.Config{Admin: adminToken, Peer: adminToken})
	if id, err := k.Check(adminToken); err != nil || id.Kind != auth.Peer {
		t.Errorf("shared token on Bearer = %+v, %v; want peer", id, err)
	}
	r.Header.Set("X-API-KEY", adminToken)
	if id, err := k.CheckRequest(r, auth.APIKey); err != nil || id.Kind != auth.Admin {
		t.Errorf("shared token on X-API-KEY = %+v, %v; want admin", id, err)
	}
	if !k.HasPeer() || auth.New(auth.Config{Admin: adminToken}).HasPeer() {
		t.Error("HasPeer: want true with a peer token only")
	}
}

// TestMissing: no secret at all is ErrMissing, worded for the scheme and
// for whether there are tenants.
func TestMissing(t *testing.T) {
	k := full(t)
	id, err := k.Check("")
	wantRefused(t, `Check("")`, id, err, auth.ErrMissing,
		`missing token: send your tenant's token (or the agentbox daemon's --token-file) as "Authorization: Bearer TOKEN"`)
	id, err = k.Check(" \n")
	wantRefused(t, "white space", id, err, auth.ErrMissing, "missing token: ")
	for _, h := range []string{"", "Basic " + adminToken, "Bearer", "Bearer  ", adminToken} {
		r, _ := http.NewRequest("GET", "/", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		id, err := k.CheckRequest(r, auth.Bearer)
		wantRefused(t, "Authorization "+h, id, err, auth.ErrMissing, "missing token: ")
	}
	r, _ := http.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+adminToken) // not E2B's header
	id, err = auth.New(auth.Config{Admin: adminToken}).CheckRequest(r, auth.APIKey)
	wantRefused(t, "no X-API-KEY", id, err, auth.ErrMissing,
		"missing token: send the token of the agentbox daemon's --token-file as E2B_API_KEY (the X-API-KEY header)")
}

// TestWrong: a secret the keyring does not hold is ErrWrong, whatever
// its length or closeness to one it holds.
func TestWrong(t *testing.T) {
	k := full(t)
	for _, s := range []string{"wrong", adminToken + "x", adminToken[:len(adminToken)-1], strings.ToUpper(adminToken), acmeToken + peerToken} {
		id, err := k.Check(s)
		wantRefused(t, "Check("+s+")", id, err, auth.ErrWrong,
			`wrong token: send your tenant's token (or the agentbox daemon's --token-file) as "Authorization: Bearer TOKEN"`)
	}
	r, _ := http.NewRequest("GET", "/", nil)
	r.Header.Set("authorization", "bEaReR "+adminToken+"x")
	id, err := auth.New(auth.Config{Admin: adminToken}).CheckRequest(r, auth.Bearer)
	wantRefused(t, "bearer, any case", id, err, auth.ErrWrong,
		`wrong token: send the token of the agentbox daemon's --token-file as "Authorization: Bearer TOKEN"`)
	r.Header.Set("Authorization", "bEaReR "+adminToken)
	if id, err := auth.New(auth.Config{Admin: adminToken}).CheckRequest(r, auth.Bearer); err != nil || id.Kind != auth.Admin {
		t.Errorf("scheme name in any case: %+v, %v", id, err)
	}
}

// TestEmpty: a keyring with nothing (or nil) holds no secret and
// requires none (a TCP listener with it needs TLS that requires client
// certificates, apiserver.CheckTCP); a keyring of the peers' token alone
// requires none either. An unset secret never matches "".
func TestEmpty(t *testing.T) {
	for name, k := range map[string]*auth.Keyring{"empty": auth.New(auth.Config{}), "nil": nil, "white space": auth.New(auth.Config{Admin: "\n", Peer: " "})} {
		if k.RequiresSecret() || k.HasPeer() || k.Tenants() != nil {
			t.Errorf("%s: RequiresSecret %v, HasPeer %v, Tenants %v; want none", name, k.RequiresSecret(), k.HasPeer(), k.Tenants())
		}
		id, err := k.Check("")
		wantRefused(t, name+`: Check("")`, id, err, auth.ErrMissing, "missing token: ")
		id, err = k.Check(adminToken)
		wantRefused(t, name+": Check(token)", id, err, auth.ErrWrong, "wrong token: ")
	}
	if auth.New(auth.Config{Peer: peerToken}).RequiresSecret() {
		t.Error("a peer token alone requires a secret")
	}
	if !auth.New(auth.Config{Admin: adminToken}).RequiresSecret() || !auth.New(auth.Config{Tenants: tenants(t)}).RequiresSecret() {
		t.Error("an admin token or tenants require no secret")
	}
}

// TestHolds: Holds tells whether a keyring is made of an admin token and
// tenants.
func TestHolds(t *testing.T) {
	reg := tenants(t)
	k := auth.New(auth.Config{Admin: adminToken + "\n", Tenants: reg, Peer: peerToken})
	for _, c := range []struct {
		admin string
		reg   *tenant.Registry
		want  bool
	}{
		{adminToken, reg, true},
		{" " + adminToken, reg, true},
		{adminToken, nil, false},
		{adminToken, tenants(t), false},
		{"", reg, false},
		{peerToken, reg, false},
	} {
		if got := k.Holds(c.admin, c.reg); got != c.want {
			t.Errorf("Holds(%q, %p) = %v, want %v", c.admin, c.reg, got, c.want)
		}
	}
	var nilKeys *auth.Keyring
	if !nilKeys.Holds("", nil) || nilKeys.Holds(adminToken, nil) || !auth.New(auth.Config{}).Holds("\n", nil) {
		t.Error("an empty keyring holds exactly nothing")
	}
}
