package netpolicy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Class is what an address is as a sandbox's destination. Classify gives
// it; the tap's firewall (vmctl/network, from Prefixes4) and the egress
// service's resolver and proxy (vmctl/egress) decide by it, so both
// layers block the same addresses. Its string values appear in error
// messages and logs.
type Class string

const (
	// ClassPublic is every address not in another class: what open mode
	// reaches and what an allowlisted name's real address must be.
	ClassPublic Class = "public"
	// ClassThisNetwork is 0.0.0.0/8 ("this network", RFC 791).
	ClassThisNetwork Class = "this-network"
	// ClassLoopback is 127.0.0.0/8 and ::1: the host itself.
	ClassLoopback Class = "loopback"
	// ClassLinkLocal is 169.254.0.0/16 (cloud metadata 169.254.169.254)
	// and fe80::/10.
	ClassLinkLocal Class = "link-local"
	// ClassMulticast is 224.0.0.0/4 and ff00::/8.
	ClassMulticast Class = "multicast"
	// ClassReserved is 240.0.0.0/4 (with broadcast 255.255.255.255) and
	// the local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215), whose
	// embedded IPv4 address cannot be known without the operator's prefix
	// length, so it is judged as unknown and never reached.
	ClassReserved Class = "reserved"
	// ClassUnspecified is :: (0.0.0.0 is ClassThisNetwork).
	ClassUnspecified Class = "unspecified"
	// ClassMetadata is a cloud metadata address outside link-local:
	// 100.100.100.200 (Alibaba Cloud) and fd00:ec2::254 (AWS over IPv6).
	ClassMetadata Class = "metadata"
	// ClassPrivate is RFC 1918: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16.
	ClassPrivate Class = "private"
	// ClassCGNAT is carrier-grade NAT, 100.64.0.0/10 (RFC 6598; cloud
	// providers put services in it).
	ClassCGNAT Class = "cgnat"
	// ClassULA is IPv6 unique local addresses, fc00::/7.
	ClassULA Class = "ula"
)

// Never reports whether no sandbox reaches an address of class c in any
// mode or by any rule: this network, loopback, link-local, multicast,
// reserved, unspecified and metadata addresses.
func (c Class) Never() bool {
	switch c {
	case ClassThisNetwork, ClassLoopback, ClassLinkLocal, ClassMulticast, ClassReserved, ClassUnspecified, ClassMetadata:
		return true
	}
	return false
}

// Inside reports whether c is one of the networks behind the host rather
// than the outside: private (RFC 1918), CGNAT or ULA. Open mode never
// reaches CGNAT; a policy with BlockPrivate (a tenant's sandbox by
// default) reaches none of them; an allowlisted name's real address may
// not be one (DNS rebinding).
func (c Class) Inside() bool {
	return c == ClassPrivate || c == ClassCGNAT || c == ClassULA
}

// classRange is one range of a Class. The lists are in match order:
// a more specific range comes before the range holding it.
type classRange struct {
	prefix netip.Prefix
	class  Class
}

var ranges4 = []classRange{
	{netip.MustParsePrefix("0.0.0.0/8"), ClassThisNetwork},
	{netip.MustParsePrefix("127.0.0.0/8"), ClassLoopback},
	{netip.MustParsePrefix("169.254.0.0/16"), ClassLinkLocal},
	{netip.MustParsePrefix("224.0.0.0/4"), ClassMulticast},
	{netip.MustParsePrefix("240.0.0.0/4"), ClassReserved},
	{netip.MustParsePrefix("100.100.100.200/32"), ClassMetadata},
	{netip.MustParsePrefix("100.64.0.0/10"), ClassCGNAT},
	{netip.MustParsePrefix("10.0.0.0/8"), ClassPrivate},
	{netip.MustParsePrefix("172.16.0.0/12"), ClassPrivate},
	{netip.MustParsePrefix("192.168.0.0/16"), ClassPrivate},
}

var ranges6 = []classRange{
	{netip.MustParsePrefix("::/128"), ClassUnspecified},
	{netip.MustParsePrefix("::1/128"), ClassLoopback},
	{netip.MustParsePrefix("fe80::/10"), ClassLinkLocal},
	{netip.MustParsePrefix("ff00::/8"), ClassMulticast},
	{netip.MustParsePrefix("fd00:ec2::254/128"), ClassMetadata},
	{netip.MustParsePrefix("fc00::/7"), ClassULA},
	{netip.MustParsePrefix("64:ff9b:1::/48"), ClassReserved},
}

// embedding is an IPv6 range whose addresses carry an IPv4 address: the
// 32 bits from bit offset, inverted for Teredo's client address.
type embedding struct {
	prefix netip.Prefix
	offset int
	invert bool
	what   string
}

// embeddings are the IPv6 forms that carry an IPv4 destination. Each is
// judged as the IPv4 address it carries: ::ffff:a.b.c.d (IPv4-mapped),
// ::a.b.c.d (IPv4-compatible, deprecated), ::ffff:0:a.b.c.d
// (IPv4-translated, SIIT), 64:ff9b::a.b.c.d (NAT64's well-known prefix,
// RFC 6052), 2002:AABB:CCDD::/48 (6to4, RFC 3056) and 2001:0::/32
// (Teredo, RFC 4380: the client's address, inverted, in the last 32
// bits). A NAT64 prefix of the operator's own (network-specific) cannot
// be recognized here.
var embeddings = []embedding{
	{netip.MustParsePrefix("::ffff:0:0/96"), 96, false, "IPv4-mapped ::ffff:0:0/96"},
	{netip.MustParsePrefix("::/96"), 96, false, "IPv4-compatible ::/96"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), 96, false, "IPv4-translated ::ffff:0:0:0/96"},
	{netip.MustParsePrefix("64:ff9b::/96"), 96, false, "NAT64 64:ff9b::/96"},
	{netip.MustParsePrefix("2002::/16"), 16, false, "6to4 2002::/16"},
	{netip.MustParsePrefix("2001::/32"), 96, true, "Teredo 2001::/32"},
}

// Embedded4 returns the IPv4 address an IPv6 address carries (the forms
// of embeddings: IPv4-mapped, IPv4-compatible, IPv4-translated, NAT64
// 64:ff9b::/96, 6to4 2002::/16, Teredo 2001::/32) and true; for an IPv4
// address or any other IPv6 address it returns a and false. :: and ::1
// are not taken as IPv4-compatible (they are the unspecified and loopback
// addresses).
func Embedded4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return a, false
	}
	a = a.WithZone("")
	if a == netip.IPv6Unspecified() || a == netip.IPv6Loopback() {
		return a, false
	}
	for _, e := range embeddings {
		if e.prefix.Contains(a) {
			return extract4(a, e), true
		}
	}
	return a, false
}

// extract4 returns the 32 bits of a (IPv6) at e's offset (a multiple of
// 8) as an IPv4 address.
func extract4(a netip.Addr, e embedding) netip.Addr {
	b := a.As16()
	u := binary.BigEndian.Uint32(b[e.offset/8:])
	if e.invert {
		u = ^u
	}
	var v [4]byte
	binary.BigEndian.PutUint32(v[:], u)
	return netip.AddrFrom4(v)
}

// Classify returns a's class. An IPv6 address that carries an IPv4
// address (Embedded4: IPv4-mapped, NAT64, 6to4, ...) has the class of
// the address it carries, so 64:ff9b::a9fe:a9fe is link-local (it is
// 169.254.169.254 through a NAT64 gateway) and 2002:7f00:1:: loopback.
// The zero Addr is ClassUnspecified.
func Classify(a netip.Addr) Class {
	if !a.IsValid() {
		return ClassUnspecified
	}
	a = a.WithZone("")
	if a.Is6() {
		for _, r := range ranges6 {
			if r.prefix.Contains(a) {
				return r.class
			}
		}
		v4, ok := Embedded4(a)
		if !ok {
			return ClassPublic
		}
		a = v4
	}
	for _, r := range ranges4 {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	return ClassPublic
}

// Prefixes4 returns the IPv4 ranges of the given classes in match order
// (the tap's firewall drops them; see vmctl/network). IPv6 has no
// entries: the tap carries IPv4 only and drops every IPv6 packet, which
// blocks every IPv4-embedding IPv6 range (64:ff9b::/96, 2002::/16, ...)
// as a whole.
func Prefixes4(classes ...Class) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range ranges4 {
		for _, c := range classes {
			if r.class == c {
				out = append(out, r.prefix)
				break
			}
		}
	}
	return out
}

// NeverClasses are the classes for which Class.Never is true, in the
// order Prefixes4 uses.
var NeverClasses = []Class{ClassThisNetwork, ClassLoopback, ClassLinkLocal, ClassMulticast, ClassReserved, ClassUnspecified, ClassMetadata}

// InsideClasses are the classes for which Class.Inside is true.
var InsideClasses = []Class{ClassPrivate, ClassCGNAT, ClassULA}

// OpenReaches reports whether open mode lets the sandbox of policy p reach
// a, judged as the tap's forward rules judge it (vmctl/network) for the
// addresses the egress resolver answers in open mode: not a Never class,
// not CGNAT (100.64.0.0/10 holds the metadata address 100.100.100.200 and
// other providers' services), and not private, CGNAT or ULA when
// p.BlockPrivate is set. Private (RFC 1918) addresses are otherwise
// reached, as open mode always has.
func (p Policy) OpenReaches(a netip.Addr) bool {
	c := Classify(a)
	switch {
	case c.Never(), c == ClassCGNAT:
		return false
	case c.Inside() && p.BlockPrivate:
		return false
	}
	return true
}

// embedded4Prefixes returns the IPv4 ranges an IPv6 range p carries
// (through the forms of Embedded4), with what carries each. A range that
// holds a whole embedding range carries 0.0.0.0/0.
func embedded4Prefixes(p netip.Prefix) (out []netip.Prefix, what []string) {
	if !p.Addr().Is6() {
		return nil, nil
	}
	p = p.Masked()
	for _, e := range embeddings {
		if !p.Overlaps(e.prefix) {
			continue
		}
		what = append(what, e.what)
		if p.Bits() <= e.prefix.Bits() {
			out = append(out, netip.MustParsePrefix("0.0.0.0/0"))
			continue
		}
		bits := min(max(p.Bits()-e.offset, 0), 32)
		q, _ := extract4(p.Addr(), e).Prefix(bits)
		out = append(out, q)
	}
	return out, what
}

// classOverlap returns the first class of classes a range p overlaps, the
// range of that class and, when p overlaps it through an IPv4-embedding
// IPv6 form, that form; ok is false when p overlaps none.
func classOverlap(p netip.Prefix, classes []Class) (c Class, r netip.Prefix, via string, ok bool) {
	in := func(c Class) bool {
		for _, x := range classes {
			if x == c {
				return true
			}
		}
		return false
	}
	list := ranges4
	if p.Addr().Is6() {
		list = ranges6
	}
	for _, cr := range list {
		if in(cr.class) && p.Overlaps(cr.prefix) {
			return cr.class, cr.prefix, "", true
		}
	}
	qs, whats := embedded4Prefixes(p)
	for i, q := range qs {
		for _, cr := range ranges4 {
			if in(cr.class) && q.Overlaps(cr.prefix) {
				return cr.class, cr.prefix, fmt.Sprintf("%s carrying %s", whats[i], q), true
			}
		}
	}
	return "", netip.Prefix{}, "", false
}

// neverEmbedded returns why an IPv6 CIDR rule's range is refused for what
// it carries: an IPv4-embedding form (NAT64, 6to4, ...) whose IPv4 range
// overlaps a Never class, or the local-use NAT64 prefix; ok false if
// neither.
func neverEmbedded(p netip.Prefix) (why string, ok bool) {
	if !p.Addr().Is6() {
		return "", false
	}
	c, r, via, ok := classOverlap(p, NeverClasses)
	if !ok {
		return "", false
	}
	if via == "" {
		return fmt.Sprintf("%s %s", c, prefixString(r)), true
	}
	return fmt.Sprintf("%s %s (as %s)", c, prefixString(r), via), true
}
