package secrets_test

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/secrets"
)

func policy(t *testing.T, mode string, allow ...string) netpolicy.Policy {
	t.Helper()
	p, err := netpolicy.Parse(mode, allow)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheck(t *testing.T) {
	allow := policy(t, "allowlist", "api.test", "*.wild.test", "other.test:8443")
	ok := secrets.Spec{Name: "API_KEY", Value: "v", Hosts: []string{"api.test"}}
	for _, tc := range []struct {
		specs []secrets.Spec
		pol   netpolicy.Policy
		want  string
	}{
		{[]secrets.Spec{ok}, policy(t, "open"), "secrets need network mode allowlist with their hosts allowed (--network allowlist --allow HOST): mode open does not send names through the host's proxy"},
		{[]secrets.Spec{{Name: "1X", Value: "v", Hosts: []string{"api.test"}}}, allow, `secret name "1X": want an environment variable name (letters, digits, _; not starting with a digit; at most 128 bytes)`},
		{[]secrets.Spec{ok, ok}, allow, "secret API_KEY is given twice"},
		{[]secrets.Spec{{Name: "SSL_CERT_FILE", Value: "v", Hosts: []string{"api.test"}}}, allow, "secret name SSL_CERT_FILE is taken by the sandbox's CA settings: choose another name"},
		{[]secrets.Spec{{Name: "K", Hosts: []string{"api.test"}}}, allow, "secret K: its value has 0 bytes: want 1 to 16384"},
		{[]secrets.Spec{{Name: "K", Value: "abc\n", Hosts: []string{"api.test"}}}, allow, "secret K: its value holds a control character at byte 3 (a newline at the end of a file?): values go into HTTP headers"},
		{[]secrets.Spec{{Name: "K", Value: "v"}}, allow, "secret K is bound to no host: give --secret-host K=HOST (the hosts its value is sent to)"},
		{[]secrets.Spec{{Name: "K", Value: "v", Hosts: []string{"*.wild.test"}}}, allow, `secret K: host "*.wild.test": want an exact host name (no wildcard, port or address), e.g. api.example.com`},
		{[]secrets.Spec{{Name: "K", Value: "v", Hosts: []string{"api.test:443"}}}, allow, `secret K: host "api.test:443": want an exact host name (no wildcard, port or address), e.g. api.example.com`},
		{[]secrets.Spec{{Name: "K", Value: "v", Hosts: []string{"evil.test"}}}, allow, "secret K: host evil.test is not in the sandbox's network allowlist: add --allow evil.test"},
	} {
		err := secrets.Check(tc.specs, tc.pol)
		if err == nil || err.Error() != tc.want || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Check(%+v): %v, want %q (invalid argument)", tc.specs, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "abc") {
			t.Errorf("error quotes the value: %v", err)
		}
	}
	// A name under a wildcard and one on its own port are fine.
	if err := secrets.Check([]secrets.Spec{{Name: "K", Value: "v\tw", Hosts: []string{"a.wild.test", "Other.Test."}}}, allow); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestNewSaveLoad(t *testing.T) {
	pol := policy(t, "allowlist", "api.test", "b.test")
	s, err := secrets.New([]secrets.Spec{
		{Name: "A", Value: "real-a", Hosts: []string{"API.test", "api.test"}},
		{Name: "B", Value: "real-b", Hosts: []string{"b.test", "api.test"}},
	}, pol, "0123456789ab")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^agentbox-secret-A-[0-9a-f]{32}$`)
	if !re.MatchString(s.Secrets[0].Placeholder) || s.Secrets[0].Placeholder == s.Secrets[1].Placeholder {
		t.Errorf("placeholders %q %q", s.Secrets[0].Placeholder, s.Secrets[1].Placeholder)
	}
	if !slices.Equal(s.Secrets[0].Hosts, []string{"api.test"}) || !slices.Equal(s.Hosts(), []string{"api.test", "b.test"}) {
		t.Errorf("hosts %q, all %q", s.Secrets[0].Hosts, s.Hosts())
	}
	env := s.Env()
	want := []string{"A=" + s.Secrets[0].Placeholder, "B=" + s.Secrets[1].Placeholder,
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt",
		"NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/agentbox.crt"}
	if !slices.Equal(env, want) {
		t.Errorf("Env %q, want %q", env, want)
	}
	if strings.Contains(strings.Join(env, " "), "real-") {
		t.Errorf("Env holds a value: %q", env)
	}

	p := filepath.Join(t.TempDir(), secrets.FileName)
	if err := s.Save(p); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	got, err := secrets.Load(p)
	if err != nil || got.Secrets[1].Value != "real-b" || got.CAKey != s.CAKey {
		t.Fatalf("Load: %+v %v", got, err)
	}
	os.Chmod(p, 0o644)
	if _, err := secrets.Load(p); err == nil || !strings.Contains(err.Error(), "want 0600") {
		t.Errorf("Load of a 0644 file: %v", err)
	}
	if _, err := secrets.Load(filepath.Join(t.TempDir(), "none")); !errors.Is(err, secrets.ErrNone) {
		t.Errorf("Load of no file: %v, want ErrNone", err)
	}
}

// TestIssuer: leaves verify against the CA for bound names only; the CA
// is an ECDSA P-256 CA constrained to the bound names.
func TestIssuer(t *testing.T) {
	s, err := secrets.New([]secrets.Spec{{Name: "A", Value: "v", Hosts: []string{"api.test"}}}, policy(t, "allowlist", "api.test", "evil.test"), "x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode([]byte(s.CACert))
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.PublicKeyAlgorithm != x509.ECDSA || !ca.MaxPathLenZero || !slices.Equal(ca.PermittedDNSDomains, []string{"api.test"}) || !ca.PermittedDNSDomainsCritical {
		t.Errorf("CA: IsCA %v alg %v maxpathzero %v permitted %q", ca.IsCA, ca.PublicKeyAlgorithm, ca.MaxPathLenZero, ca.PermittedDNSDomains)
	}
	iss, err := s.Issuer()
	if err != nil {
		t.Fatal(err)
	}
	c1, err := iss.Certificate("API.test.")
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := iss.Certificate("api.test")
	if c1 != c2 {
		t.Errorf("second certificate for api.test not cached")
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := c1.Leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: pool}); err != nil {
		t.Errorf("leaf does not verify: %v", err)
	}
	if _, err := iss.Certificate("evil.test"); err == nil {
		t.Errorf("certificate for an unbound name")
	}
}

// TestLoadRefusesPlanted: a secrets file a sandbox's QEMU user could have
// planted in a directory it owned (before issue 24) is refused, never
// read: a symlink (to a file the daemon may read), a hard link, a
// directory, and a 0600 file of another owner (a set with a CA the guest
// chose).
func TestLoadRefusesPlanted(t *testing.T) {
	s, err := secrets.New([]secrets.Spec{{Name: "A", Value: "real-a", Hosts: []string{"api.test"}}}, policy(t, "allowlist", "api.test"), "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	real := filepath.Join(dir, "real.json")
	if err := s.Save(real); err != nil {
		t.Fatal(err)
	}
	symlink, hardlink, subdir := filepath.Join(dir, "symlink"), filepath.Join(dir, "hardlink"), filepath.Join(dir, "subdir")
	if err := os.Symlink(real, symlink); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(real, hardlink); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(subdir, 0o700); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ path, says string }{
		{symlink, symlink + " is a symbolic link: refused"},
		{hardlink, hardlink + " has 2 hard links, want 1: refused"},
		{subdir, subdir + " is not a regular file"},
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(dir, "other.json")
		if err := s.Save(other); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, 302996, 302996); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ path, says string }{other, other + " is owned by uid 302996, not the daemon's 0: refused"})
	}
	for _, c := range cases {
		if got, err := secrets.Load(c.path); err == nil || !strings.Contains(err.Error(), c.says) || errors.Is(err, secrets.ErrNone) {
			t.Errorf("Load(%s) = %v, %v; want an error saying %q", filepath.Base(c.path), got, err, c.says)
		}
	}
}
