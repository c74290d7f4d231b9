package agentproto

import (
	"os"
	"path/filepath"
	"testing"
)

func TestUploadTempTarget(t *testing.T) {
	// The names os.CreateTemp makes from the pattern are recognised.
	dir := t.TempDir()
	for _, name := range []string{"w.txt", ".hidden", "a.agentbox-1", "x"} {
		f, err := os.CreateTemp(dir, UploadTempPattern(name))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if got, ok := UploadTempTarget(filepath.Base(f.Name())); !ok || got != name {
			t.Errorf("UploadTempTarget(%q) = %q, %v; want %q, true", filepath.Base(f.Name()), got, ok, name)
		}
	}
	for base, want := range map[string]string{".w.txt.agentbox-824410569": "w.txt", "..x.agentbox-0": ".x", ".a.agentbox-1.agentbox-4294967295": "a.agentbox-1"} {
		if got, ok := UploadTempTarget(base); !ok || got != want {
			t.Errorf("UploadTempTarget(%q) = %q, %v; want %q", base, got, ok, want)
		}
	}
	for _, base := range []string{
		"w.txt", ".w.txt", "w.txt.agentbox-1", ".w.txt.agentbox-", ".w.txt.agentbox-12a", ".w.txt.agentbox-x",
		".agentbox-12", "..agentbox-12", ".w.txt.agentbox-42949672950", ".w.txt.agentbox--1", ".w.txt.agentbox-+1",
		".w.txt.tmp123", "sub/.w.txt.agentbox-1",
	} {
		if got, ok := UploadTempTarget(base); ok {
			t.Errorf("UploadTempTarget(%q) = %q, true; want false", base, got)
		}
	}
}
