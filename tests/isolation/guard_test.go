package isolation

// The safety net of the guest probes: a test-owned nftables table that
// counts and drops every packet from the test daemon's pool or taps that
// would leave through an interface that is not a sandbox tap. It runs after
// agentbox's own chains (priority 0, theirs is mangle -150), so a packet
// agentbox drops never reaches it: a counter above zero means agentbox's
// policy let something through (a test failure), and the guard kept it on
// this machine.

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

type guard struct {
	t     *testing.T
	conn  *nftables.Conn
	table *nftables.Table
	fwd   *nftables.Chain
	post  *nftables.Chain
	out   *nftables.Chain
}

// newGuard installs the guard table for pool; its cleanup deletes it.
func newGuard(t *testing.T, name string, pool netip.Prefix) *guard {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	g := &guard{t: t, conn: c, table: c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})}
	accept := nftables.ChainPolicyAccept
	prio := nftables.ChainPriorityFilter
	chain := func(n string, hook *nftables.ChainHook) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Name: n, Table: g.table, Type: nftables.ChainTypeFilter, Hooknum: hook, Priority: prio, Policy: &accept})
	}
	g.fwd, g.post, g.out = chain("forward", nftables.ChainHookForward), chain("postrouting", nftables.ChainHookPostrouting), chain("output", nftables.ChainHookOutput)
	for _, ch := range []*nftables.Chain{g.fwd, g.post, g.out} {
		g.rule(ch, "pool "+pool.String(), append(srcIn(pool), notTap()...))
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("install the guard table inet %s: %v", name, err)
	}
	t.Cleanup(func() {
		c.DelTable(g.table)
		if err := c.Flush(); err != nil {
			t.Errorf("delete the guard table inet %s: %v", name, err)
		}
	})
	return g
}

// addTap guards every packet (IPv4 or IPv6) from tap.
func (g *guard) addTap(tap string) {
	g.t.Helper()
	for _, ch := range []*nftables.Chain{g.fwd, g.post} {
		g.rule(ch, "tap "+tap, append([]expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(tap)},
		}, notTap()...))
	}
	if err := g.conn.Flush(); err != nil {
		g.t.Fatalf("guard tap %s: %v", tap, err)
	}
}

func (g *guard) rule(ch *nftables.Chain, tag string, match []expr.Any) {
	g.conn.AddRule(&nftables.Rule{Table: g.table, Chain: ch, UserData: []byte(tag),
		Exprs: append(match, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})})
}

// hits returns "chain: rule tag" → packets of every rule that counted any.
func (g *guard) hits() map[string]uint64 {
	g.t.Helper()
	out := map[string]uint64{}
	for _, ch := range []*nftables.Chain{g.fwd, g.post, g.out} {
		rules, err := g.conn.GetRules(g.table, ch)
		if err != nil {
			g.t.Fatalf("read the guard's counters: %v", err)
		}
		for _, r := range rules {
			for _, e := range r.Exprs {
				if c, ok := e.(*expr.Counter); ok && c.Packets > 0 {
					out[fmt.Sprintf("%s: %s", ch.Name, r.UserData)] = c.Packets
				}
			}
		}
	}
	return out
}

// srcIn matches IPv4 packets whose source is in p.
func srcIn(p netip.Prefix) []expr.Any {
	p = p.Masked()
	mask := make([]byte, 4)
	for i := range p.Bits() {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	a := p.Addr().As4()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
	}
}

// notTap matches an output interface whose name does not start with "abx"
// (nft's oifname != "abx*").
func notTap() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte("abx")},
	}
}

func ifname(n string) []byte {
	b := make([]byte, 16)
	copy(b, n)
	return b
}
