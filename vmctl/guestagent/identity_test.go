package guestagent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
)

func TestIdentity(t *testing.T) {
	etc := t.TempDir()
	if err := os.WriteFile(filepath.Join(etc, "machine-id"), []byte("0123456789abcdef0123456789abcdef\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	var host string
	c, _ := newClientOpts(t, guestagent.Options{EtcDir: etc, SetHostname: func(n string) error { host = n; return nil }})
	ctx := context.Background()
	resp, err := c.SetIdentity(ctx, "agentbox-abc", "fedcba9876543210fedcba9876543210")
	if err != nil {
		t.Fatal(err)
	}
	if host != "agentbox-abc" || !resp.MachineIDWritten || resp.HostnameFileWritten {
		t.Errorf("hostname %q, response %+v; want agentbox-abc, machine id written, no /etc/hostname (absent)", host, resp)
	}
	got, _ := os.ReadFile(filepath.Join(etc, "machine-id"))
	fi, _ := os.Stat(filepath.Join(etc, "machine-id"))
	if string(got) != "fedcba9876543210fedcba9876543210\n" || fi.Mode().Perm() != 0o444 {
		t.Errorf("machine-id %q mode %v; want the new id, mode kept", got, fi.Mode())
	}
	// /etc/hostname is replaced when it exists; without machineID the
	// machine id stays.
	os.WriteFile(filepath.Join(etc, "hostname"), []byte("old\n"), 0o644)
	if resp, err = c.SetIdentity(ctx, "second", ""); err != nil || !resp.HostnameFileWritten || resp.MachineIDWritten {
		t.Fatalf("second identity: %+v %v", resp, err)
	}
	if got, _ := os.ReadFile(filepath.Join(etc, "hostname")); string(got) != "second\n" {
		t.Errorf("/etc/hostname %q", got)
	}
	// Bad input is refused before anything changes.
	for _, bad := range [][2]string{{"", ""}, {"-x", ""}, {"a/b", ""}, {"ok", "NOTHEX"}} {
		if _, err := c.SetIdentity(ctx, bad[0], bad[1]); codeOf(err) != agentproto.CodeInvalid {
			t.Errorf("SetIdentity(%q, %q) = %v, want invalid", bad[0], bad[1], err)
		}
	}
	if host != "second" {
		t.Errorf("a refused identity changed the hostname to %q", host)
	}
}
