package secrets

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"
)

// Validity of the CA and of the leaf certificates the proxy shows the
// guest. Leaves are made again a day before they expire.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 90 * 24 * time.Hour
	leafRenew    = 24 * time.Hour
	clockSkew    = time.Hour // NotBefore lies this far back: the guest's clock may lag
)

// newCA makes a CA certificate (ECDSA P-256, path length 0, permitted to
// sign only for hosts) and returns it and its key as PEM.
func newCA(label string, hosts []string) (certPEM, keyPEM string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("secrets: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{Organization: []string{"agentbox"}, CommonName: "agentbox sandbox CA " + label},
		NotBefore:                   now.Add(-clockSkew),
		NotAfter:                    now.Add(caValidity),
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid:       true,
		IsCA:                        true,
		MaxPathLen:                  0,
		MaxPathLenZero:              true,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         hosts,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", fmt.Errorf("secrets: CA certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("secrets: CA key: %w", err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// Issuer makes the certificates the egress proxy shows the guest for the
// bound hosts, signed by a Set's CA, one per name, cached until a day
// before it expires. It is safe for concurrent use.
type Issuer struct {
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	hosts map[string]bool
	key   *ecdsa.PrivateKey // one leaf key for all names

	mu    sync.Mutex
	cache map[string]*tls.Certificate
}

// Issuer returns the Set's certificate issuer. Errors: a malformed CA.
func (s *Set) Issuer() (*Issuer, error) {
	cb, _ := pem.Decode([]byte(s.CACert))
	kb, _ := pem.Decode([]byte(s.CAKey))
	if cb == nil || kb == nil {
		return nil, errors.New("secrets: CA certificate or key is not PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("secrets: CA certificate: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("secrets: CA key: %w", err)
	}
	caKey, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("secrets: CA key is a %T, want ECDSA", k)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("secrets: leaf key: %w", err)
	}
	hosts := map[string]bool{}
	for _, h := range s.Hosts() {
		hosts[h] = true
	}
	return &Issuer{ca: ca, caKey: caKey, hosts: hosts, key: leafKey, cache: map[string]*tls.Certificate{}}, nil
}

// Certificate returns the certificate for name (a bound host; any case,
// trailing dot allowed), with the CA's certificate after it. Errors: a
// name no secret is bound to; signing errors.
func (i *Issuer) Certificate(name string) (*tls.Certificate, error) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if !i.hosts[name] {
		return nil, fmt.Errorf("secrets: no secret is bound to %q", name)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if c := i.cache[name]; c != nil && time.Until(c.Leaf.NotAfter) > leafRenew {
		return c, nil
	}
	now := time.Now()
	notAfter := now.Add(leafValidity)
	if notAfter.After(i.ca.NotAfter) {
		notAfter = i.ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, i.ca, &i.key.PublicKey, i.caKey)
	if err != nil {
		return nil, fmt.Errorf("secrets: certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, i.ca.Raw}, PrivateKey: i.key, Leaf: leaf}
	i.cache[name] = c
	return c, nil
}
