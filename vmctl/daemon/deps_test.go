package daemon_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDaemonLinksNoFront: the service core implements backend.Backend and
// links none of the fronts that serve it (go list -deps, tests
// excluded): a front depends on the daemon's contract, never the other
// way round. It needs no libvirt.
func TestDaemonLinksNoFront(t *testing.T) {
	const pkg = "github.com/agentbox/agentbox/vmctl/daemon"
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	deps := strings.Fields(string(out))
	fronts := []string{"apiserver", "client", "clusterproxy", "e2b", "envd", "mcp", "host"}
	linked := map[string]bool{}
	for _, dep := range deps {
		linked[dep] = true
	}
	if !linked["github.com/agentbox/agentbox/vmctl/backend"] {
		t.Errorf("vmctl/daemon does not link vmctl/backend, the contract it implements")
	}
	for _, f := range fronts {
		if linked["github.com/agentbox/agentbox/vmctl/"+f] {
			t.Errorf("vmctl/daemon links vmctl/%s: the daemon implements vmctl/backend and imports no front", f)
		}
	}
}
