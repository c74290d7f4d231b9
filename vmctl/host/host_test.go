package host

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/daemon"
)

// TestStartUndoesListeners: a step of serve's Start that fails after the
// listeners were made (here the templates, before libvirt) closes them:
// the socket is gone and another Start may listen on it.
func TestStartUndoesListeners(t *testing.T) {
	sock := filepath.Join(testenv.ShortTempDir(t), "s")
	boom := errors.New("boom")
	o := Options{
		StateDir: t.TempDir(), RuntimeDir: t.TempDir(),
		Socket:    sock,
		Templates: func(context.Context) ([]daemon.Template, error) { return nil, boom },
	}
	for range 2 {
		if _, err := Start(t.Context(), o); !errors.Is(err, boom) {
			t.Fatalf("Start = %v, want the templates' error", err)
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Fatalf("the failed Start left its socket: %v", err)
		}
	}
}

// TestListenTCPNeedsAuth: a TCP listener without a token, TLS or tenants
// is refused before any listener is made.
func TestListenTCPNeedsAuth(t *testing.T) {
	sock := filepath.Join(testenv.ShortTempDir(t), "s")
	_, err := Listen(Options{Socket: sock, ListenTCP: "127.0.0.1:0"})
	if err == nil || !strings.HasPrefix(err.Error(), "refusing to listen on TCP 127.0.0.1:0 without --token-file") {
		t.Fatalf("Listen = %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the refused Listen made its socket: %v", err)
	}
	ls, err := Listen(Options{Socket: sock, ListenTCP: "127.0.0.1:0", Auth: Auth{Token: "0123456789abcdef0123456789abcdef"}})
	if err != nil || len(ls) != 2 {
		t.Fatalf("Listen with a token: %v, %d listeners", err, len(ls))
	}
	for _, l := range ls {
		l.Close()
	}
}

// TestStartRefusesTLSAlone: serve with --listen-tcp and a TLS server
// certificate but neither client certificates nor a token (nor tenants)
// authenticates nobody: Start refuses it with an error that says what to
// add, before any step (the templates are never asked), and leaves
// nothing: no socket, no TCP listener, nothing in the state or runtime
// dir. With required client certificates the same Start gets past the
// listeners.
func TestStartRefusesTLSAlone(t *testing.T) {
	serverCert, pool := selfSigned(t)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := tl.Addr().String()
	tl.Close()
	sockDir := testenv.ShortTempDir(t)
	sock := filepath.Join(sockDir, "s")
	stateDir, runtimeDir := t.TempDir(), t.TempDir()
	boom := errors.New("boom")
	asked := 0
	o := Options{
		StateDir: stateDir, RuntimeDir: runtimeDir,
		Socket:    sock,
		ListenTCP: addr,
		Auth:      Auth{TLS: &tls.Config{Certificates: []tls.Certificate{serverCert}}},
		Templates: func(context.Context) ([]daemon.Template, error) { asked++; return nil, boom },
	}
	_, err = Start(t.Context(), o)
	want := "refusing to listen on TCP " + addr + " unauthenticated: --tls-cert needs --tls-client-ca (client certificates) or a token (--token-file or --tenants); TLS alone encrypts but lets anyone who can reach the port run commands in your sandboxes"
	if err == nil || err.Error() != want {
		t.Fatalf("Start = %v\nwant %s", err, want)
	}
	if asked != 0 {
		t.Errorf("the refused Start asked for the templates %d times", asked)
	}
	for _, d := range []string{sockDir, stateDir, runtimeDir} {
		if ents, err := os.ReadDir(d); err != nil || len(ents) != 0 {
			t.Errorf("the refused Start left %v in %s (%v)", ents, d, err)
		}
	}
	if l, err := net.Listen("tcp", addr); err != nil {
		t.Errorf("the refused Start holds %s: %v", addr, err)
	} else {
		l.Close()
	}

	o.Auth.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	if _, err := Start(t.Context(), o); !errors.Is(err, boom) {
		t.Fatalf("Start with client certificates = %v, want the templates' error", err)
	}
	if asked != 1 {
		t.Errorf("templates asked %d times, want 1", asked)
	}
	if ents, err := os.ReadDir(sockDir); err != nil || len(ents) != 0 {
		t.Errorf("the failed Start left %v in the socket's directory (%v)", ents, err)
	}
}

// selfSigned returns a self-signed server certificate for 127.0.0.1 and
// a pool of it (as the client CA a test may require).
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentbox test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, pool
}

// TestCheckActivated: systemd's TCP sockets get the same check as
// --listen-tcp (its unix sockets need none).
func TestCheckActivated(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	ul, err := net.Listen("unix", filepath.Join(testenv.ShortTempDir(t), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	if err := checkActivated(apiserver.Config{}, []net.Listener{ul}); err != nil {
		t.Errorf("a unix socket: %v", err)
	}
	err = checkActivated(apiserver.Config{}, []net.Listener{ul, tl})
	if want := "systemd socket activation: refusing to listen on TCP " + tl.Addr().String() + " without --token-file"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("a TCP socket without a secret: %v, want %s…", err, want)
	}
	if err := checkActivated(apiserver.Config{Token: "0123456789abcdef0123456789abcdef"}, []net.Listener{ul, tl}); err != nil {
		t.Errorf("a TCP socket with a token: %v", err)
	}
}
