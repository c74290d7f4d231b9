package guestagent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSetHostsEntry(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "hosts")
	os.WriteFile(p, []byte("127.0.0.1\tlocalhost\n10.0.0.9 host.agentbox.internal # old\n::1 localhost ip6-localhost"), 0o644)
	// A symbolic link in its place (NixOS) is replaced by a file.
	link := filepath.Join(dir, "hosts-link")
	os.Symlink(p, link)
	for _, target := range []string{p, link} {
		if err := setHostsEntry(target, "host.agentbox.internal", "10.213.0.1"); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(target)
		want := "127.0.0.1\tlocalhost\n::1 localhost ip6-localhost\n10.213.0.1\thost.agentbox.internal\n"
		if string(b) != want {
			t.Errorf("%s: %q, want %q", target, b, want)
		}
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink != 0 {
		t.Error("the symbolic link was written through instead of replaced")
	}
}
