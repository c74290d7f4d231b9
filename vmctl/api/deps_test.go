package api_test

import (
	"os/exec"
	"strings"
	"testing"
)

// goDeps returns the packages pkg links (go list -deps, tests excluded).
func goDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestWirePackageDependsOnStdlibOnly: vmctl/api is the wire package every
// front, the client and SDK generators import: the standard library and
// vmctl/errdefs only.
func TestWirePackageDependsOnStdlibOnly(t *testing.T) {
	for _, dep := range goDeps(t, "github.com/agentbox/agentbox/vmctl/api") {
		first, _, _ := strings.Cut(dep, "/")
		switch {
		case dep == "github.com/agentbox/agentbox/vmctl/api", dep == "github.com/agentbox/agentbox/vmctl/errdefs":
		case !strings.Contains(first, "."), first == "vendor":
			// the standard library (and its vendored packages)
		default:
			t.Errorf("vmctl/api links %s: the wire package may use the standard library and vmctl/errdefs only", dep)
		}
	}
}

// TestClientLinksNoServer: vmctl/client does not link the HTTP server,
// Prometheus or go-systemd.
func TestClientLinksNoServer(t *testing.T) {
	for _, dep := range goDeps(t, "github.com/agentbox/agentbox/vmctl/client") {
		for _, bad := range []string{"github.com/agentbox/agentbox/vmctl/apiserver", "github.com/agentbox/agentbox/vmctl/daemon", "github.com/prometheus/", "github.com/coreos/go-systemd"} {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("vmctl/client links %s", dep)
			}
		}
	}
}
