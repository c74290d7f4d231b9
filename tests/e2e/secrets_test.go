package e2e

// Secrets that never enter the guest (docs/network.md#secrets): a guest
// under TCG sends its placeholder to a host HTTPS server named api.test
// (--network-host), which sees the real value; another allowlisted server
// sees the placeholder; domain fronting is refused; the value is in
// neither the guest (environment, files, console) nor the audit log, the
// API's answers, the daemon's log or its store; a daemon restart keeps it
// working.

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/secrets"
)

// secretServer is an HTTPS server for one name, its certificate from a
// test CA, that records the Authorization header of each request by path.
type secretServer struct {
	addr netip.AddrPort
	leaf []byte // DER of its certificate

	mu   sync.Mutex
	auth map[string]string // path → Authorization
}

func newSecretServer(t *testing.T, iss *secrets.Issuer, name string, addr netip.Addr) *secretServer {
	cert, err := iss.Certificate(name)
	must(t, "certificate for "+name, err)
	s := &secretServer{leaf: cert.Certificate[0], auth: map[string]string{}}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	must(t, "listen for "+name, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok {
			var size int
			fmt.Sscan(n, &size)
			w.Header().Set("Content-Length", fmt.Sprint(size))
			writeZeros(w, size)
			return
		}
		s.mu.Lock()
		s.auth[r.URL.Path] = r.Header.Get("Authorization")
		s.mu.Unlock()
		fmt.Fprintf(w, "%s ok", name)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s.addr = ln.Addr().(*net.TCPAddr).AddrPort()
	return s
}

func (s *secretServer) seen() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.auth {
		out[k] = v
	}
	return out
}

// secretsProbe is the guest's Python: requests with the placeholder to
// api.test (trusted through the sandbox's CA), to other.test (its own
// certificate, not trusted in the guest: read unverified, its SHA-256
// printed), and a fronted one (TLS to api.test, Host other.test).
const secretsProbe = `
import hashlib, json, os, socket, ssl, sys, urllib.error, urllib.request
api, other, tag = sys.argv[1], sys.argv[2], sys.argv[3]
ph = os.environ["API_KEY"]
out = {}
def get(url, host=None, ctx=None):
    h = {"Authorization": "Bearer " + ph}
    if host:
        h["Host"] = host
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=h), timeout=120, context=ctx).read().decode()
    except urllib.error.HTTPError as e:
        return "HTTP %d" % e.code
raw = ssl._create_unverified_context()
out["api"] = get("https://api.test:%s/%s" % (api, tag))
out["other"] = get("https://other.test:%s/%s" % (other, tag), ctx=raw)
out["front"] = get("https://api.test:%s/front-%s" % (api, tag), host="other.test")
s = raw.wrap_socket(socket.create_connection(("other.test", int(other)), timeout=60), server_hostname="other.test")
out["other_cert"] = hashlib.sha256(s.getpeercert(True)).hexdigest()
print(json.dumps(out, sort_keys=True))
`

func TestSecrets(t *testing.T) {
	// The upstream servers' CA (a secrets CA reused as a plain one) and
	// their two names on loopback addresses of their own.
	pol, _ := netpolicy.Parse("allowlist", []string{"api.test", "other.test"})
	upstream, err := secrets.New([]secrets.Spec{{Name: "UP", Value: "x", Hosts: []string{"api.test", "other.test"}}}, pol, "upstream")
	must(t, "upstream CA", err)
	iss, err := upstream.Issuer()
	must(t, "upstream issuer", err)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	must(t, "write upstream CA", os.WriteFile(caFile, []byte(upstream.CACert), 0o644))
	n := byte(os.Getpid()%200 + 20)
	api := newSecretServer(t, iss, "api.test", netip.AddrFrom4([4]byte{127, 219, n, 1}))
	other := newSecretServer(t, iss, "other.test", netip.AddrFrom4([4]byte{127, 219, n, 2}))

	real := "sk-test-" + hex.EncodeToString(randomBytes(16))
	valueFile := filepath.Join(t.TempDir(), "api-key")
	must(t, "value file", os.WriteFile(valueFile, []byte(real+"\n"), 0o600))

	d := newDaemon(t, append(netFlags(t, 219, "abxsecret"),
		"--network-host", "api.test="+api.addr.Addr().String(), "--network-host", "other.test="+other.addr.Addr().String(),
		"--secrets-upstream-ca", caFile)...)
	must(t, "start the daemon", d.Start())
	allow := []string{"--network", "allowlist", "--allow", fmt.Sprintf("api.test:%d", api.addr.Port()), "--allow", fmt.Sprintf("other.test:%d", other.addr.Port())}
	create := func(extra ...string) result {
		args := append([]string{"create", "--image", imageDir(t), "--accel", "tcg", "--boot-timeout", "180s"}, allow...)
		return d.cli(nil, append(args, extra...)...)
	}

	// Refused: a host outside the allowlist, a warm create, a host without
	// its secret, mode open (API). Nothing is made.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--secret", "API_KEY=@" + valueFile, "--secret-host", "API_KEY=evil.test"}, "secret API_KEY: host evil.test is not in the sandbox's network allowlist: add --allow evil.test"},
		{[]string{"--secret", "API_KEY=@" + valueFile, "--secret-host", "API_KEY=api.test", "--warm"}, "secrets need a cold boot (their CA is installed as the guest boots): drop warm (--warm)"},
		{[]string{"--secret-host", "API_KEY=api.test"}, "--secret-host API_KEY=api.test: no --secret API_KEY=@FILE"},
	} {
		r := create(tc.args...)
		if r.code != 125 || len(r.stdout) != 0 || !strings.Contains(string(r.stderr), tc.want) || strings.Contains(string(r.stderr), real) {
			t.Errorf("create %v: exit %d, stdout %q, stderr %q; want 125 with %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	e := d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, `"network":{"mode":"open"},"secrets":[{"name":"K","value":"v","hosts":["api.test"]}]`)), http.StatusBadRequest, "invalid_argument")
	if want := "secrets need network mode allowlist with their hosts allowed (--network allowlist --allow HOST): mode open does not send names through the host's proxy"; e.Message != want {
		t.Errorf("create with mode open: %q, want %q", e.Message, want)
	}
	if l := d.list(""); len(l) != 0 {
		t.Fatalf("refused creates left sandboxes: %v", ids(l))
	}

	r := create("--name", "sec1", "--secret", "API_KEY=@"+valueFile, "--secret-host", "API_KEY=api.test")
	if r.code != 0 {
		t.Fatalf("create: exit %d, stderr %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(string(r.stdout))
	d.Track(id)

	// The API shows the name, placeholder and host.
	body, _ := d.call("GET", "/v1/sandboxes/"+id, nil, http.StatusOK)
	var view struct {
		Secrets []struct {
			Name, Placeholder string
			Hosts             []string
		} `json:"secrets"`
	}
	must(t, "decode the sandbox", json.Unmarshal(body, &view))
	if len(view.Secrets) != 1 || view.Secrets[0].Name != "API_KEY" || !strings.HasPrefix(view.Secrets[0].Placeholder, "agentbox-secret-API_KEY-") || len(view.Secrets[0].Hosts) != 1 || view.Secrets[0].Hosts[0] != "api.test" {
		t.Fatalf("sandbox secrets %+v", view.Secrets)
	}
	ph := view.Secrets[0].Placeholder

	probe := func(tag string) {
		t.Helper()
		req, _ := json.Marshal(map[string]any{"cmd": []string{"python3", "-c", secretsProbe, fmt.Sprint(api.addr.Port()), fmt.Sprint(other.addr.Port()), tag}})
		res := d.mustExec(id, string(req))
		if res.exit == nil || res.exit.ExitCode != 0 {
			t.Fatalf("probe %s: exit %+v, stdout %s, stderr %s", tag, res.exit, res.stdout, res.stderr)
		}
		var got map[string]string
		must(t, "decode the probe's output", json.Unmarshal(res.stdout, &got))
		want := map[string]string{"api": "api.test ok", "other": "other.test ok", "front": "HTTP 421", "other_cert": fmt.Sprintf("%x", sha256.Sum256(other.leaf))}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("probe %s: %s = %q, want %q", tag, k, got[k], v)
			}
		}
		if a := api.seen(); a["/"+tag] != "Bearer "+real {
			t.Errorf("probe %s: api.test saw Authorization %q, want the real value", tag, a["/"+tag])
		} else if _, fronted := a["/front-"+tag]; fronted {
			t.Errorf("probe %s: the fronted request reached api.test", tag)
		}
		if o := other.seen(); o["/"+tag] != "Bearer "+ph || o["/front-"+tag] != "" {
			t.Errorf("probe %s: other.test saw %q, want the placeholder (and no fronted request)", tag, o)
		}
	}
	probe("first")

	// The guest holds only the placeholder: its environment, its files
	// (the CA it trusts, the bundle), every process's environment.
	d.expectExec(id, `{"cmd":["sh","-c","printf %s \"$API_KEY\""]}`, 0, ph, "")
	// (The value's shape is searched for, so the value itself never goes in.)
	grep := d.mustExec(id, `{"cmd":["sh","-c","grep -rlsE 'sk-test-[0-9a-f]{32}' /etc /root /tmp /usr/local /var /run /proc/[0-9]*/environ; [ $? = 0 ] && echo found || echo none; grep -c BEGIN /usr/local/share/ca-certificates/agentbox.crt; echo $SSL_CERT_FILE"]}`)
	// grep exits 2 when a process ends between the glob and its read
	// (its environ is gone): only a match (exit 0, a file named) fails.
	if got := string(grep.stdout); got != "none\n1\n/etc/ssl/certs/ca-certificates.crt\n" {
		t.Errorf("the guest's files: %q (stderr %q), want no match, the CA file, SSL_CERT_FILE", got, grep.stderr)
	}

	// A daemon restart: the adopted sandbox's proxy reads the secrets again.
	d.Kill9()
	must(t, "restart the daemon", d.Start())
	probe("after-restart")

	// Neither the audit log, the API's answers, the console, the daemon's
	// log nor its store holds the value; the audit has the intercepted
	// connections and the refused fronting.
	auditBody, _ := d.call("GET", "/v1/audit", nil, http.StatusOK)
	listBody, _ := d.call("GET", "/v1/sandboxes", nil, http.StatusOK)
	console, _ := os.ReadFile(filepath.Join(d.State, "sandboxes", id, "console.log"))
	db, _ := os.ReadFile(filepath.Join(d.State, "state.db"))
	for what, b := range map[string][]byte{"audit log": auditBody, "sandbox list": listBody, "sandbox": body, "console": console, "daemon log": []byte(d.Log.String()), "store": db} {
		if bytes.Contains(b, []byte(real)) {
			t.Errorf("the %s holds the secret's value", what)
		}
	}
	if len(console) == 0 || len(db) == 0 {
		t.Errorf("console %d bytes, store %d bytes: nothing was checked", len(console), len(db))
	}
	var intercepted, refused int
	for _, e := range d.audit(id) {
		if e.Action != "egress.intercept" {
			continue
		}
		switch {
		case e.Args["allowed"] == true && e.Args["name"] == "api.test" && e.Args["reason"] == "intercepted":
			intercepted++
		case e.Args["allowed"] == false && e.Args["name"] == "other.test" && e.Args["reason"] == `Host "other.test" does not match the TLS server name api.test (domain fronting)` && e.Error == "refused":
			refused++
		}
	}
	if intercepted < 2 || refused != 2 {
		t.Errorf("audit: %d intercepted connections to api.test and %d refused fronting requests, want ≥ 2 and 2", intercepted, refused)
	}
	if fi, err := os.Stat(filepath.Join(d.State, "sandboxes", id, secrets.FileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("secrets file: %v %v, want mode 0600", fi, err)
	}

	if os.Getenv("AGENTBOX_NET_BENCH") != "" {
		size := 64 << 20
		for _, tc := range []struct{ host, what string }{
			{fmt.Sprintf("other.test:%d", other.addr.Port()), "HTTPS through the passthrough proxy (spliced)"},
			{fmt.Sprintf("api.test:%d", api.addr.Port()), "HTTPS through the intercepting proxy"},
		} {
			script := `import ssl, sys, time, urllib.request
t = time.monotonic(); n = len(urllib.request.urlopen("https://%s/bytes/%d", timeout=600, context=ssl._create_unverified_context()).read())
print(n, time.monotonic() - t)`
			req, _ := json.Marshal(map[string]any{"cmd": []string{"python3", "-c", fmt.Sprintf(script, tc.host, size)}})
			res := d.mustExec(id, string(req))
			var bytes int
			var secs float64
			fmt.Sscan(string(res.stdout), &bytes, &secs)
			t.Logf("download %d MiB, %s: %.2f s, %.1f MiB/s", bytes>>20, tc.what, secs, float64(bytes)/secs/(1<<20))
		}
	}
	d.cli(nil, "rm", "-f", id)
	d.assertGone(id)
}
