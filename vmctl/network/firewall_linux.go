package network

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
)

// chainPriority is the priority of the table's filter chains: mangle
// (-150), before the usual filter chains (0) of other firewalls. A drop is
// final whatever the order; running first only means our verdicts are seen
// before anything else spends work on the packet.
var chainPriority = nftables.ChainPriorityMangle

// Base chain names of the table.
const (
	chainInput       = "input"
	chainForward     = "forward"
	chainPostrouting = "postrouting"
)

// firewall owns one nftables table (family inet) through netlink.
type firewall struct {
	mu                   sync.Mutex
	conn                 *nftables.Conn
	table                *nftables.Table
	group                uint32 // interface group of this table's taps (tapGroup)
	based                bool   // ensureBase ran
	input, forward, post *nftables.Chain
}

// fixedVersion prefixes the tags of the base chains' fixed rules; rules
// with another "fixed" tag (an older layout) are replaced.
const fixedVersion = "fixed2:"

// openFirewall prepares the table name; the table itself is made on
// first use (install), so a daemon that never gives a sandbox a network
// leaves nothing in the kernel. It checks that nf_tables answers.
func openFirewall(name string) (*firewall, error) {
	conn, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	if _, err := conn.ListTablesOfFamily(nftables.TableFamilyINet); err != nil {
		return nil, fmt.Errorf("nftables: list tables (needs CAP_NET_ADMIN and the nf_tables kernel module): %w", err)
	}
	fw := &firewall{conn: conn, table: &nftables.Table{Family: nftables.TableFamilyINet, Name: name}, group: tapGroup(name)}
	fw.input = &nftables.Chain{Name: chainInput, Table: fw.table}
	fw.forward = &nftables.Chain{Name: chainForward, Table: fw.table}
	fw.post = &nftables.Chain{Name: chainPostrouting, Table: fw.table}
	return fw, nil
}

// ensureBase adds the table and base chains unless they exist, then
// writes each base chain's fixed tail rules if missing and removes fixed
// rules of an older layout. Callers hold fw.mu.
func (fw *firewall) ensureBase() error {
	if fw.based {
		return nil
	}
	c := fw.conn
	accept := nftables.ChainPolicyAccept
	c.AddTable(fw.table)
	fw.input = c.AddChain(&nftables.Chain{Name: chainInput, Table: fw.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: chainPriority, Policy: &accept})
	fw.forward = c.AddChain(&nftables.Chain{Name: chainForward, Table: fw.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: chainPriority, Policy: &accept})
	fw.post = c.AddChain(&nftables.Chain{Name: chainPostrouting, Table: fw.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: create table inet %s (needs CAP_NET_ADMIN and the nf_tables kernel module): %w", fw.table.Name, err)
	}
	// The catch-alls match this table's interface group, not the tap name
	// prefix: two daemons (two tables) must not drop each other's taps.
	fixed := map[*nftables.Chain][][]expr.Any{
		fw.input: {
			join(ifGroup(expr.MetaKeyIIFGROUP, fw.group), drop()),
		},
		fw.forward: {
			join(ifGroup(expr.MetaKeyOIFGROUP, fw.group), ctEstablished(), accept_()),
			join(ifGroup(expr.MetaKeyOIFGROUP, fw.group), drop()),
			join(ifGroup(expr.MetaKeyIIFGROUP, fw.group), drop()),
		},
		fw.post: nil,
	}
	for ch, rules := range fixed {
		have, err := c.GetRules(fw.table, ch)
		if err != nil {
			return fmt.Errorf("nftables: list chain %s: %w", ch.Name, err)
		}
		for _, r := range have {
			if bytes.HasPrefix(r.UserData, []byte("fixed")) && !bytes.HasPrefix(r.UserData, []byte(fixedVersion)) {
				if err := c.DelRule(r); err != nil {
					return fmt.Errorf("nftables: remove an old rule of chain %s: %w", ch.Name, err)
				}
			}
		}
		for i, r := range rules {
			tag := []byte(fmt.Sprintf("%s%d", fixedVersion, i))
			if !hasTag(have, tag) {
				c.AddRule(&nftables.Rule{Table: fw.table, Chain: ch, Exprs: r, UserData: tag})
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: fixed rules of table inet %s: %w", fw.table.Name, err)
	}
	fw.based = true
	return nil
}

// tableExists reports whether the table is in the kernel. Callers hold fw.mu.
func (fw *firewall) tableExists() (bool, error) {
	ts, err := fw.conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("nftables: list tables: %w", err)
	}
	for _, t := range ts {
		if t.Name == fw.table.Name {
			return true, nil
		}
	}
	return false, nil
}

// sandboxRules are what install adds for one sandbox.
type sandboxRules struct {
	id, tap     string
	host, guest netip.Addr
	policy      netpolicy.Policy
	tcpPorts    []uint16 // egress service ports on host
	// outBps and outBurst cap the traffic from the tap (outlimit.go);
	// outBps 0: no cap.
	outBps, outBurst uint64
}

func inChain(id string) string  { return "in-" + id }
func fwdChain(id string) string { return "fwd-" + id }
func sbTag(id string) []byte    { return []byte("sb:" + id) }

// install adds the sandbox's chains, its outbound limit object (when
// s.outBps is set) and its jump and masquerade rules in one netlink batch
// (all or nothing), after removing any left from before (idempotent).
func (fw *firewall) install(s sandboxRules) error {
	if err := fw.remove(s.id); err != nil {
		return err
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if err := fw.ensureBase(); err != nil {
		return err
	}
	c := fw.conn
	in := c.AddChain(&nftables.Chain{Name: inChain(s.id), Table: fw.table})
	fwd := c.AddChain(&nftables.Chain{Name: fwdChain(s.id), Table: fw.table})
	add := func(ch *nftables.Chain, e ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: fw.table, Chain: ch, Exprs: e})
	}
	// The outbound cap first in both chains: every packet from the tap,
	// to this host or forwarded, draws from the one limit object.
	if s.outBps > 0 {
		c.AddObj(&nftables.NamedObj{Table: fw.table, Name: outObject(s.id), Type: nftables.ObjTypeLimit,
			Obj: &expr.Limit{Type: expr.LimitTypePktBytes, Rate: s.outBps, Unit: expr.LimitTimeSecond, Burst: uint32(s.outBurst), Over: true}})
		add(in, join(overLimit(outObject(s.id)), drop())...)
		add(fwd, join(overLimit(outObject(s.id)), drop())...)
	}
	// From the tap to this host: only the egress service on H.
	add(in, join(nfproto(unix.NFPROTO_IPV4, expr.CmpOpNeq), drop())...)
	add(in, join(ipAddr(12, s.guest, expr.CmpOpNeq), drop())...)
	add(in, join(ipAddr(16, s.host, expr.CmpOpNeq), drop())...)
	// Replies to connections the host opened (conntrack never confirms a
	// guest-opened flow that was dropped, so the guest cannot make one).
	add(in, join(ctEstablished(), accept_())...)
	add(in, join(l4proto(unix.IPPROTO_UDP), dport(53), accept_())...)
	add(in, join(l4proto(unix.IPPROTO_TCP), dport(53), accept_())...)
	for _, p := range s.tcpPorts {
		add(in, join(l4proto(unix.IPPROTO_TCP), dport(p), accept_())...)
	}
	add(in, drop()...)

	// Forwarded: never to other sandboxes or the blocked destinations
	// (link-local, loopback, multicast, metadata, ...; blockedDests);
	// then the policy.
	add(fwd, join(nfproto(unix.NFPROTO_IPV4, expr.CmpOpNeq), drop())...)
	add(fwd, join(ipAddr(12, s.guest, expr.CmpOpNeq), drop())...)
	add(fwd, join(ifPrefix(expr.MetaKeyOIFNAME), drop())...)
	add(fwd, join(ifGroup(expr.MetaKeyOIFGROUP, fw.group), drop())...)
	for _, p := range blockedDests(s.policy) { // blocked.go
		add(fwd, join(ipPrefix(16, p), drop())...)
	}
	switch s.policy.Mode {
	case netpolicy.ModeAllowlist:
		for _, r := range s.policy.CIDRRules() {
			if !r.Prefix.Addr().Is4() {
				continue // IPv6 is dropped above; Setup refuses such rules
			}
			add(fwd, join(ipPrefix(16, r.Prefix), l4proto(unix.IPPROTO_TCP), dport(r.Port), accept_())...)
		}
	case netpolicy.ModeOpen:
		add(fwd, accept_()...)
	}
	add(fwd, drop()...)

	// Jumps at the top of the base chains (before the catch-all drops).
	tag := sbTag(s.id)
	c.InsertRule(&nftables.Rule{Table: fw.table, Chain: fw.input, UserData: tag,
		Exprs: join(ifName(expr.MetaKeyIIFNAME, s.tap), jump(in.Name))})
	c.InsertRule(&nftables.Rule{Table: fw.table, Chain: fw.forward, UserData: tag,
		Exprs: join(ifName(expr.MetaKeyIIFNAME, s.tap), jump(fwd.Name))})
	c.AddRule(&nftables.Rule{Table: fw.table, Chain: fw.post, UserData: tag,
		Exprs: join(ipAddr(12, s.guest, expr.CmpOpEq), ifPrefixNeq(expr.MetaKeyOIFNAME), []expr.Any{&expr.Masq{}})})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: rules of sandbox %s in table inet %s: %w", s.id, fw.table.Name, err)
	}
	return nil
}

// remove deletes the sandbox's rules, chains and outbound limit object;
// missing ones are fine.
func (fw *firewall) remove(id string) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if ok, err := fw.tableExists(); err != nil || !ok {
		return err
	}
	c := fw.conn
	tag := sbTag(id)
	var errs []error
	for _, ch := range []*nftables.Chain{fw.input, fw.forward, fw.post} {
		rules, err := c.GetRules(fw.table, ch)
		if err != nil {
			errs = append(errs, fmt.Errorf("nftables: list chain %s: %w", ch.Name, err))
			continue
		}
		for _, r := range rules {
			if bytes.Equal(r.UserData, tag) {
				if err := c.DelRule(r); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := c.Flush(); err != nil {
		errs = append(errs, fmt.Errorf("nftables: delete rules of sandbox %s: %w", id, err))
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("nftables: list chains: %w", err))...)
	}
	for _, ch := range chains {
		if ch.Table.Name == fw.table.Name && (ch.Name == inChain(id) || ch.Name == fwdChain(id)) {
			c.FlushChain(ch)
			c.DelChain(ch)
		}
	}
	if err := c.Flush(); err != nil {
		errs = append(errs, fmt.Errorf("nftables: delete chains of sandbox %s: %w", id, err))
	}
	// The limit object once no rule refers to it (the kernel refuses to
	// delete an object in use).
	objs, err := c.GetNamedObjects(fw.table)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("nftables: list objects: %w", err))...)
	}
	for _, o := range objs {
		if no, ok := o.(*nftables.NamedObj); ok && no.Type == nftables.ObjTypeLimit && no.Name == outObject(id) {
			c.DeleteObject(no)
			if err := c.Flush(); err != nil {
				errs = append(errs, fmt.Errorf("nftables: delete limit %s of sandbox %s: %w", no.Name, id, err))
			}
		}
	}
	return errors.Join(errs...)
}

// sandboxes returns the IDs that have chains or an outbound limit object
// in the table.
func (fw *firewall) sandboxes() ([]string, error) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if ok, err := fw.tableExists(); err != nil || !ok {
		return nil, err
	}
	chains, err := fw.conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("nftables: list chains: %w", err)
	}
	var ids []string
	for _, ch := range chains {
		if ch.Table.Name != fw.table.Name {
			continue
		}
		if id, ok := strings.CutPrefix(ch.Name, "in-"); ok {
			ids = append(ids, id)
		}
	}
	objs, err := fw.conn.GetNamedObjects(fw.table)
	if err != nil {
		return nil, fmt.Errorf("nftables: list objects: %w", err)
	}
	for _, o := range objs {
		if no, ok := o.(*nftables.NamedObj); ok {
			if id, ok := strings.CutPrefix(no.Name, outObject("")); ok && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// destroy deletes the whole table (tests, and `Manager.Destroy`).
func (fw *firewall) destroy() error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if ok, err := fw.tableExists(); err != nil || !ok {
		return err
	}
	fw.based = false
	fw.conn.DelTable(fw.table)
	if err := fw.conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nftables: delete table inet %s: %w", fw.table.Name, err)
	}
	return nil
}

func hasTag(rules []*nftables.Rule, tag []byte) bool {
	for _, r := range rules {
		if bytes.Equal(r.UserData, tag) {
			return true
		}
	}
	return false
}

// Expression builders. Register 1 is used throughout; each rule is a
// conjunction of matches followed by a verdict.

func join(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func ifname(n string) []byte {
	b := make([]byte, 16)
	copy(b, n)
	return b
}

func ifName(key expr.MetaKey, name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

// ifPrefix matches interfaces whose name starts with TapPrefix (nft's
// `iifname "abx*"`: a compare of the prefix bytes only).
func ifPrefix(key expr.MetaKey) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(TapPrefix)},
	}
}

// ifGroup matches the interface group (iifgroup/oifgroup) g.
func ifGroup(key expr.MetaKey, g uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(g)},
	}
}

func ifPrefixNeq(key expr.MetaKey) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(TapPrefix)},
	}
}

func nfproto(p byte, op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: []byte{p}},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// ipAddr compares the IPv4 address at network header offset off (12
// source, 16 destination). Only valid after an nfproto ipv4 match.
func ipAddr(off uint32, a netip.Addr, op expr.CmpOp) []expr.Any {
	b := a.As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Cmp{Op: op, Register: 1, Data: b[:]},
	}
}

// ipPrefix matches an IPv4 address at offset off inside p.
func ipPrefix(off uint32, p netip.Prefix) []expr.Any {
	p = p.Masked()
	mask := make([]byte, 4)
	for i := range p.Bits() {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	a := p.Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
	}
}

// dport matches the TCP/UDP destination port; only after an l4proto match.
func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
	}
}

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// overLimit matches when the packet goes over the named limit object
// (made with the "over" flag); each evaluation takes the packet's bytes
// from the object's bucket.
func overLimit(name string) []expr.Any {
	return []expr.Any{&expr.Objref{Type: int(nftables.ObjTypeLimit), Name: name}}
}

func accept_() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }
func drop() []expr.Any    { return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}} }
func jump(chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}}
}
