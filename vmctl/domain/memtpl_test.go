package domain

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestMemoryBackendXML: a clone's backend renders as qemu:commandline
// passthrough (golden file); bad RAM paths are refused; Private drops the
// file and the incoming migration; Taints says custom-argv.
func TestMemoryBackendXML(t *testing.T) {
	s := validSpec()
	s.MemoryBackend = &MemoryBackend{File: "/var/lib/agentbox/warm/k/ram-1", Incoming: true}
	got, err := XML(s)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "memory-clone.xml")
	if *update {
		os.WriteFile(golden, []byte(got), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("XML differs from %s (go test -update rewrites it):\n%s", golden, got)
	}
	if a := (&MemoryBackend{File: "/r", Shared: true}).Args(256); !slices.Equal(a, []string{"-object", "memory-backend-file,id=agentbox-ram,size=256M,mem-path=/r,share=on", "-machine", "memory-backend=agentbox-ram"}) {
		t.Errorf("template args %q", a)
	}
	if a := s.MemoryBackend.Private().Args(512); !slices.Equal(a, []string{"-object", "memory-backend-ram,id=agentbox-ram,size=512M", "-machine", "memory-backend=agentbox-ram"}) {
		t.Errorf("private args %q", a)
	}
	if tt := s.Taints(); !slices.Equal(tt, []string{"custom-argv"}) || validSpec().Taints() != nil {
		t.Errorf("taints %q", tt)
	}
	for _, mb := range []*MemoryBackend{{File: "ram"}, {File: "/a,b"}, {Shared: true}, {Incoming: true}} {
		s.MemoryBackend = mb
		if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("backend %+v: %v; want ErrInvalidSpec", mb, err)
		}
	}
}
