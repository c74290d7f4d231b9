package e2e

// The network edges of issue 24, read back from the kernel: which
// destination ranges a sandbox's forward chain drops. No traffic is sent
// to them (100.64.0.0/10 and the metadata address are not this test's to
// reach); the chain is what decides.

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// fwdDrops returns the destination ranges the forward chain of sandbox id
// in table drops ("0.0.0.0/8 127.0.0.0/8 ..."), in rule order: the rules
// `@nh,128,32 & MASK == ADDR drop` (nft list ruleset's form of the IPv4
// destination match) the daemon writes.
func fwdDrops(t *testing.T, table, id string) string {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.GetRules(&nftables.Table{Family: nftables.TableFamilyINet, Name: table}, &nftables.Chain{Name: "fwd-" + id})
	if err != nil {
		t.Fatalf("nftables: chain fwd-%s of table inet %s: %v", id, table, err)
	}
	var out []string
	for _, r := range rules {
		if len(r.Exprs) != 4 {
			continue
		}
		p, ok1 := r.Exprs[0].(*expr.Payload)
		b, ok2 := r.Exprs[1].(*expr.Bitwise)
		cmp, ok3 := r.Exprs[2].(*expr.Cmp)
		v, ok4 := r.Exprs[3].(*expr.Verdict)
		if !ok1 || !ok2 || !ok3 || !ok4 || p.Base != expr.PayloadBaseNetworkHeader || p.Offset != 16 || p.Len != 4 || v.Kind != expr.VerdictDrop {
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
	return strings.Join(out, " ")
}

// neverDrops is what every sandbox's forward chain drops; open mode adds
// CGNAT 100.64.0.0/10.
const neverDrops = "0.0.0.0/8 127.0.0.0/8 169.254.0.0/16 224.0.0.0/4 240.0.0.0/4 100.100.100.200/32"
