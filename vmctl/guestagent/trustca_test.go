package guestagent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/secrets"
)

func TestTrustCA(t *testing.T) {
	pol, _ := netpolicy.Parse("allowlist", []string{"api.test"})
	s, err := secrets.New([]secrets.Spec{{Name: "A", Value: "v", Hosts: []string{"api.test"}}}, pol, "t")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	// The bundle is a symbolic link into a read-only "store", as on NixOS.
	store := filepath.Join(root, "store-bundle.crt")
	os.WriteFile(store, []byte("-----BEGIN CERTIFICATE-----\nSYSTEM\n-----END CERTIFICATE-----"), 0o444)
	bundle := filepath.Join(root, agentproto.TrustCABundle)
	os.MkdirAll(filepath.Dir(bundle), 0o755)
	if err := os.Symlink(store, bundle); err != nil {
		t.Fatal(err)
	}
	c, _ := newClientOpts(t, guestagent.Options{TrustRoot: root})
	ctx := context.Background()
	for range 2 { // a second time (a restarted sandbox) appends nothing
		if err := c.TrustCA(ctx, s.CACert); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(bundle)
	want := "-----BEGIN CERTIFICATE-----\nSYSTEM\n-----END CERTIFICATE-----\n" + s.CACert
	if string(got) != want {
		t.Errorf("bundle:\n%s\nwant\n%s", got, want)
	}
	if fi, _ := os.Lstat(bundle); !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode %v, want a regular 0644 file", fi.Mode())
	}
	if own, _ := os.ReadFile(filepath.Join(root, agentproto.TrustCAFile)); string(own) != s.CACert {
		t.Errorf("%s: %q", agentproto.TrustCAFile, own)
	}
	if store, _ := os.ReadFile(store); string(store) != "-----BEGIN CERTIFICATE-----\nSYSTEM\n-----END CERTIFICATE-----" {
		t.Errorf("the store's bundle changed: %q", store)
	}
	// Not a CA, or not PEM: refused before anything is written.
	if err := c.TrustCA(ctx, "garbage"); err == nil || !strings.Contains(err.Error(), "want one PEM block of type CERTIFICATE") {
		t.Errorf("garbage: %v", err)
	}
}
