package network

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
)

// newTestManager makes a Manager on a table of its own (deleted at the end,
// after checking nothing of the test's sandboxes is left).
func newTestManager(t *testing.T, pool string, egress EgressFunc) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "vmctl/network tests need root (taps, nftables)")
	}
	table := fmt.Sprintf("abxunit%d", os.Getpid())
	m, err := New(Config{Pool: netip.MustParsePrefix(pool), Table: table, Egress: egress})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(ipForwardPath); err == nil {
		t.Cleanup(func() { os.WriteFile(ipForwardPath, b, 0) })
	}
	t.Cleanup(func() {
		if err := m.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy: %v", err)
		}
		if tables(t)[table] {
			t.Errorf("table %s is left after Destroy", table)
		}
	})
	return m
}

// tables returns the names of the inet tables.
func tables(t *testing.T) map[string]bool {
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, tb := range ts {
		out[tb.Name] = true
	}
	return out
}

// chains returns the chain names of table.
func chains(t *testing.T, table string) map[string]bool {
	c, _ := nftables.New()
	chs, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, ch := range chs {
		if ch.Table.Name == table {
			out[ch.Name] = true
		}
	}
	return out
}

type closer struct{ closed *int }

func (c closer) Close() error { *c.closed++; return nil }

func TestManagerSetupTeardownSweep(t *testing.T) {
	closed := 0
	started := map[string]Attachment{}
	m := newTestManager(t, "10.213.250.0/29", func(_ context.Context, id string, att Attachment, p netpolicy.Policy) (io.Closer, error) {
		started[id] = att
		return closer{&closed}, nil
	})
	if tables(t)[m.Table()] {
		t.Fatalf("New made table %s before any sandbox needed it", m.Table())
	}
	ctx := context.Background()
	pol, _ := netpolicy.Parse("allowlist", []string{"example.test", "198.51.100.0/24:8080", "host:5432"})
	const id1, id2, id3 = "aaaaaaaaaaa1", "aaaaaaaaaaa2", "aaaaaaaaaaa3"

	att, err := m.Setup(ctx, id1, pol, 0)
	if err != nil {
		t.Fatal(err)
	}
	if att.Tap != "abx"+id1 || att.MAC != "02:ab:aa:aa:aa:aa" || att.Bits != 30 || !netip.MustParsePrefix("10.213.250.0/29").Contains(att.Guest) || att.Host.Next() != att.Guest {
		t.Fatalf("attachment %+v", att)
	}
	if started[id1] != att {
		t.Fatalf("egress started with %+v, want %+v", started[id1], att)
	}
	link, err := netlink.LinkByName(att.Tap)
	if err != nil {
		t.Fatalf("tap: %v", err)
	}
	if a := link.Attrs(); a.Alias != tapAlias(m.Table()) || a.Group != tapGroup(m.Table()) || a.Flags&(1<<0) == 0 {
		t.Errorf("tap attrs: alias %q group %#x flags %v", a.Alias, a.Group, a.Flags)
	}
	addrs, _ := netlink.AddrList(link, netlink.FAMILY_V4)
	if len(addrs) != 1 || addrs[0].IPNet.String() != att.Host.String()+"/30" {
		t.Errorf("tap addresses %v, want %s/30", addrs, att.Host)
	}
	if ch := chains(t, m.Table()); !ch["in-"+id1] || !ch["fwd-"+id1] || !ch["input"] || !ch["forward"] || !ch["postrouting"] {
		t.Errorf("chains %v", ch)
	}

	// The pool has two /30s: the second sandbox gets the other, the third
	// finds none and leaves nothing.
	att2, err := m.Setup(ctx, id2, netpolicy.Policy{Mode: netpolicy.ModeOpen}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if att2.Subnet() == att.Subnet() {
		t.Fatalf("two sandboxes share %s", att.Subnet())
	}
	if _, err := m.Setup(ctx, id3, pol, 0); err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("third Setup: %v, want the pool exhausted", err)
	}
	if _, err := netlink.LinkByName("abx" + id3); err == nil || chains(t, m.Table())["in-"+id3] {
		t.Fatal("a failed Setup left its tap or chains")
	}
	for _, bad := range []netpolicy.Policy{{Mode: netpolicy.ModeNone}, mustParse(t, "allowlist", "[2001:db8::]/32:443")} {
		if _, err := m.Setup(ctx, id3, bad, 0); err == nil {
			t.Errorf("Setup(%s) accepted", bad)
		}
	}

	// Teardown removes everything of id1 and frees its subnet.
	if err := m.Teardown(ctx, id1); err != nil {
		t.Fatal(err)
	}
	if closed != 1 {
		t.Errorf("egress closed %d times, want 1", closed)
	}
	if _, err := netlink.LinkByName(att.Tap); err == nil || chains(t, m.Table())["in-"+id1] {
		t.Fatal("Teardown left the tap or chains")
	}
	if err := m.Teardown(ctx, id1); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
	if _, err := m.Setup(ctx, id3, pol, 0); err != nil {
		t.Fatalf("Setup after a Teardown freed a subnet: %v", err)
	}

	// A new manager on the same table (a restarted daemon) adopts id2 and
	// sweeps id3, which no record keeps.
	m2, err := New(Config{Pool: netip.MustParsePrefix("10.213.250.0/29"), Table: m.Table()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Adopt(ctx, id2, att2, netpolicy.Policy{Mode: netpolicy.ModeOpen}); err != nil {
		t.Fatal(err)
	}
	removed, err := m2.Sweep(ctx, func(id string) bool { return id == id2 })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(removed, ",") != "rules "+id3+",tap abx"+id3 {
		t.Errorf("Sweep removed %v", removed)
	}
	if ch := chains(t, m.Table()); !ch["in-"+id2] || ch["in-"+id3] {
		t.Errorf("after Sweep: chains %v", ch)
	}
	if err := m2.Teardown(ctx, id2); err != nil {
		t.Fatal(err)
	}
}

func mustParse(t *testing.T, mode string, allow ...string) netpolicy.Policy {
	p, err := netpolicy.Parse(mode, allow)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReleaseAndCleanup checks the daemon's exit: the
// table stays while a tap of it is left (a sandbox running for the next
// daemon) and is deleted once none is; Cleanup removes table and taps
// without a manager (a daemon that will not come back).
func TestReleaseAndCleanup(t *testing.T) {
	closed := 0
	egress := func(context.Context, string, Attachment, netpolicy.Policy) (io.Closer, error) {
		return closer{&closed}, nil
	}
	m := newTestManager(t, "10.213.251.0/29", egress)
	ctx := context.Background()
	table := m.Table()
	const id1, id2 = "bbbbbbbbbbb1", "bbbbbbbbbbb2"

	// A daemon that never gave a sandbox a network has no table to remove.
	m0, err := New(Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if kept, err := m0.Release(ctx); err != nil || kept != nil {
		t.Fatalf("Release with no table: kept %v, %v", kept, err)
	}
	if tables(t)[table] {
		t.Fatalf("table %s made by Release", table)
	}

	// Sandboxes left running keep the table; their egress services stop.
	if _, err := m.Setup(ctx, id1, netpolicy.Policy{Mode: netpolicy.ModeOpen}, 0); err != nil {
		t.Fatal(err)
	}
	att, err := m.Setup(ctx, id2, netpolicy.Policy{Mode: netpolicy.ModeAllowlist}, 0)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := m.Release(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(kept, ",") != "abx"+id1+",abx"+id2 || closed != 2 {
		t.Fatalf("Release with running sandboxes: kept %v, egress closed %d times; want [abx%s abx%s], 2", kept, closed, id1, id2)
	}
	if !tables(t)[table] || !chains(t, table)["in-"+id1] || !tapExists("abx"+id1) {
		t.Fatal("Release removed the table, rules or tap of a sandbox left running")
	}
	// After Release no new network is made (the table may be gone).
	const id3 = "bbbbbbbbbbb3"
	if _, err := m.Setup(ctx, id3, netpolicy.Policy{Mode: netpolicy.ModeOpen}, 0); err == nil || !strings.Contains(err.Error(), "shut down") {
		t.Fatalf("Setup after Release: %v, want refused", err)
	}
	if tapExists("abx"+id3) || chains(t, table)["in-"+id3] {
		t.Fatal("a refused Setup left its tap or chains")
	}

	// The next daemon adopts id2; once it is stopped and id1's domain is
	// gone, Release deletes the table (with id1's chains).
	m2, err := New(Config{Pool: netip.MustParsePrefix("10.213.251.0/29"), Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Adopt(ctx, id2, att, netpolicy.Policy{Mode: netpolicy.ModeAllowlist}); err != nil {
		t.Fatal(err)
	}
	if err := m2.Teardown(ctx, id2); err != nil {
		t.Fatal(err)
	}
	if err := deleteTap("abx" + id1); err != nil { // id1's domain died
		t.Fatal(err)
	}
	if kept, err := m2.Release(ctx); err != nil || kept != nil {
		t.Fatalf("Release with no sandbox left: kept %v, %v", kept, err)
	}
	if tables(t)[table] {
		t.Fatalf("table %s left after the last sandbox was stopped", table)
	}

	// Cleanup: two sandboxes left by a daemon that will not come back.
	m3, err := New(Config{Pool: netip.MustParsePrefix("10.213.251.0/29"), Table: table, Egress: egress})
	if err != nil {
		t.Fatal(err)
	}
	defer m3.Close()
	for _, id := range []string{id1, id2} {
		if _, err := m3.Setup(ctx, id, netpolicy.Policy{Mode: netpolicy.ModeOpen}, 0); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := Cleanup(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	if want := "tap abx" + id1 + ",tap abx" + id2 + ",table inet " + table; strings.Join(removed, ",") != want {
		t.Errorf("Cleanup removed %v, want %s", removed, want)
	}
	if tables(t)[table] || tapExists("abx"+id1) || tapExists("abx"+id2) {
		t.Fatal("Cleanup left the table or a tap")
	}
	if removed, err := Cleanup(ctx, table); err != nil || removed != nil {
		t.Errorf("second Cleanup: %v, %v; want nothing", removed, err)
	}
	if _, err := Cleanup(ctx, "bad-name"); err == nil || !strings.Contains(err.Error(), "want a letter") {
		t.Errorf("Cleanup(bad-name): %v", err)
	}
}

// fwdDrops reads sandbox id's forward chain back from the kernel and
// returns the destination ranges it drops ("100.64.0.0/10 ..."), in rule
// order, and whether it ends in open mode's accept.
func fwdDrops(t *testing.T, table, id string) (drops string, acceptsAll bool) {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.GetRules(&nftables.Table{Family: nftables.TableFamilyINet, Name: table}, &nftables.Chain{Name: fwdChain(id)})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rules {
		e := r.Exprs
		if len(e) == 1 {
			if v, ok := e[0].(*expr.Verdict); ok && v.Kind == expr.VerdictAccept {
				acceptsAll = true
			}
			continue
		}
		if len(e) != 4 {
			continue
		}
		p, ok1 := e[0].(*expr.Payload)
		b, ok2 := e[1].(*expr.Bitwise)
		cmp, ok3 := e[2].(*expr.Cmp)
		v, ok4 := e[3].(*expr.Verdict)
		if !ok1 || !ok2 || !ok3 || !ok4 || p.Offset != 16 || p.Len != 4 || v.Kind != expr.VerdictDrop {
			continue
		}
		bits := 0
		for _, m := range b.Mask {
			for ; m&0x80 != 0; m <<= 1 {
				bits++
			}
		}
		a, _ := netip.AddrFromSlice(cmp.Data)
		out = append(out, netip.PrefixFrom(a, bits).String())
	}
	return strings.Join(out, " "), acceptsAll
}

// TestForwardChainBlocks: the kernel's forward chains drop what
// blockedDests says: the always-blocked ranges with 100.100.100.200 for
// every sandbox, CGNAT in open mode, private and CGNAT with BlockPrivate
// (a tenant's sandbox), whatever the mode.
func TestForwardChainBlocks(t *testing.T) {
	m := newTestManager(t, "10.213.249.0/28", nil)
	ctx := context.Background()
	allow := mustParse(t, "allowlist", "198.51.100.0/24:80")
	tenantAllow, err := allow.WithPrivateBlocked()
	if err != nil {
		t.Fatal(err)
	}
	inside := " 100.64.0.0/10 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16"
	for _, tc := range []struct {
		id     string
		p      netpolicy.Policy
		drops  string
		accept bool
	}{
		{"ccccccccccc1", allow, never, false},
		{"ccccccccccc2", netpolicy.Policy{Mode: netpolicy.ModeOpen}, never + " 100.64.0.0/10", true},
		{"ccccccccccc3", netpolicy.Policy{Mode: netpolicy.ModeOpen, BlockPrivate: true}, never + inside, true},
		{"ccccccccccc4", tenantAllow, never + inside, false},
	} {
		if _, err := m.Setup(ctx, tc.id, tc.p, 0); err != nil {
			t.Fatal(err)
		}
		drops, accept := fwdDrops(t, m.Table(), tc.id)
		if drops != tc.drops || accept != tc.accept {
			t.Errorf("%s: forward chain drops %q, accepts all %v; want %q, %v", tc.p, drops, accept, tc.drops, tc.accept)
		}
	}
}
