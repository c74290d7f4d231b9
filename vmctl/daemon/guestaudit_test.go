package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/egress"
)

// TestAuditEgressBounded: the egress proxy's decisions a guest causes
// are audited as guest-caused entries: a refusal naming a 1 MiB Host
// (name, reason and error message) is written with its strings cut to
// audit.MaxFieldBytes and under audit.MaxGuestEntryBytes, and a flood of
// them is cut to the sandbox's rate, every dropped one counted in an
// audit.ActionGuestDropped entry (written at the latest when the daemon
// shuts down). Decisions other than interceptions are not audited.
func TestAuditEgressBounded(t *testing.T) {
	dir := t.TempDir()
	stateDir := mkdir(t, filepath.Join(dir, "state"))
	d, err := daemon.New(context.Background(), daemon.Config{Driver: noDomains{}, StateDir: stateDir, RuntimeDir: mkdir(t, filepath.Join(dir, "run"))})
	if err != nil {
		t.Fatal(err)
	}
	host := strings.Repeat("h", 1<<20)
	dec := egress.Decision{Kind: egress.KindIntercept, Name: host, Port: 443, Upstream: netip.MustParseAddrPort("192.0.2.1:443"),
		Reason: fmt.Sprintf("Host %q does not match the TLS server name api.test (domain fronting)", host)}
	const sent = audit.GuestBurst + 5
	for range sent {
		d.AuditEgress("a00000000001", dec)
	}
	d.AuditEgress("a00000000001", egress.Decision{Kind: egress.KindProxy, Name: "other.test", Reason: "not in allowlist"})
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var written, dropped, other int
	err = audit.ReadDir(filepath.Join(stateDir, "audit"), audit.Filter{Sandbox: "a00000000001"}, func(e audit.Entry) error {
		line, _ := json.Marshal(e)
		if len(line) >= audit.MaxGuestEntryBytes {
			t.Errorf("a %s entry of %d bytes", e.Action, len(line))
		}
		switch e.Action {
		case audit.ActionEgressIntercept:
			written++
			if name := e.Args["name"].(string); name != audit.Cut(host, audit.MaxFieldBytes) || len(e.ErrorMessage) != audit.MaxFieldBytes || e.Caller != "guest" || e.Error != "refused" {
				t.Errorf("entry: name of %d bytes, message of %d, caller %q, error %q", len(name), len(e.ErrorMessage), e.Caller, e.Error)
			}
		case audit.ActionGuestDropped:
			dropped += int(e.Args["dropped"].(float64))
		default:
			other++
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sent: %d written, %d counted as dropped", sent, written, dropped)
	// Time passes between the appends, so a token may come back: the
	// count is at least the burst, and every one sent is written or
	// counted as dropped.
	if written < audit.GuestBurst || written+dropped != sent || other != 0 {
		t.Errorf("%d written, %d counted as dropped, %d other entries; want at least %d written and %d in all", written, dropped, other, audit.GuestBurst, sent)
	}
}
