package backend_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestContractLinksWireOnly: vmctl/backend is the contract between the
// fronts and the daemon, so it links the wire types (vmctl/api,
// vmctl/errdefs), the audit entry and the standard library only, never
// a front or the daemon.
func TestContractLinksWireOnly(t *testing.T) {
	const pkg = "github.com/agentbox/agentbox/vmctl/backend"
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	for _, dep := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(dep, "/")
		switch dep {
		case pkg, "github.com/agentbox/agentbox/vmctl/api", "github.com/agentbox/agentbox/vmctl/errdefs", "github.com/agentbox/agentbox/vmctl/audit":
			continue
		}
		if strings.Contains(first, ".") && first != "vendor" {
			t.Errorf("vmctl/backend links %s: the contract may use the standard library, vmctl/api, vmctl/errdefs and vmctl/audit only", dep)
		}
	}
}
