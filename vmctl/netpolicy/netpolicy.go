// Package netpolicy holds a sandbox's network policy: the mode (none, allowlist,
// open) and the destinations it may reach, parsed from the CLI's and the REST
// API's `--allow DEST` strings. It is pure: no I/O, no name resolution. The
// host plumbing (vmctl/network) turns CIDR rules into firewall rules, and the
// egress service (vmctl/egress) enforces name and host:PORT rules at the host
// side of the sandbox's tap.
//
// DEST forms accepted by Parse (one per --allow):
//
//	NAME                 example.com         TCP 80 and 443 to that name, checked against TLS SNI / HTTP Host
//	NAME:PORT            example.com:8443    TCP PORT to that name (SNI or Host must match)
//	*.NAME[:PORT]        *.example.com       any name strictly below example.com (not example.com itself)
//	CIDR:PORT            198.51.100.0/24:80  TCP PORT to any address in CIDR (firewall + NAT, no name check)
//	IP:PORT              198.51.100.7:80     the same as 198.51.100.7/32:80
//	[IPv6]/LEN:PORT      [2001:db8::]/32:443 IPv6 CIDR; [2001:db8::1]:443 is a /128
//	host:PORT            host:5432           the host's 127.0.0.1:PORT, as host.agentbox.internal:PORT
//
// Names are case-insensitive ASCII (internationalized names in punycode,
// xn--...), stored lowercased without a trailing dot.
//
// A Policy has two options besides its rules (options.go): DNS (DNSStrict:
// the host resolves only names the policy spells out) and BlockPrivate (no
// private, CGNAT or ULA destination; the daemon sets it for tenants).
// Addresses are judged by Classify (addrclass.go), which the tap's firewall
// and the egress service share; an IPv6 address that carries an IPv4
// address (NAT64 64:ff9b::/96, 6to4 2002::/16, IPv4-mapped, ...) is judged
// as the IPv4 address it carries.
package netpolicy

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// ErrInvalid is wrapped by every error of Parse, ParseRule, ParseMode and
// Policy.UnmarshalJSON; the message says what to fix.
var ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "", "invalid network policy")

// HostAlias is the name under which the guest reaches a host:PORT rule's port.
// The egress resolver answers it with the host side of the sandbox's tap.
const HostAlias = "host.agentbox.internal"

// Mode is a sandbox's network mode. Its string values are part of the API and
// never change.
type Mode string

const (
	// ModeNone: no network device at all (the default; the empty Mode means none).
	ModeNone Mode = "none"
	// ModeAllowlist: egress only to the policy's Allow rules; DNS answers only
	// for allowed names.
	ModeAllowlist Mode = "allowlist"
	// ModeOpen: NAT to the outside, still without the host's services, link-local
	// and metadata addresses, or other sandboxes. Only host:PORT rules may be
	// added (everything else is already reachable).
	ModeOpen Mode = "open"
)

// ParseMode parses "none", "allowlist" or "open"; "" is ModeNone.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeNone:
		return ModeNone, nil
	case ModeAllowlist, ModeOpen:
		return Mode(s), nil
	}
	return "", fmt.Errorf("%w: unknown network mode %q: use none, allowlist or open", ErrInvalid, s)
}

// RuleKind says which DEST form a Rule came from.
type RuleKind int

const (
	// RuleName: TCP to a host name, checked against TLS SNI or the HTTP Host header.
	RuleName RuleKind = iota + 1
	// RuleCIDR: TCP to an address range and port, enforced by the firewall.
	RuleCIDR
	// RuleHost: the host's loopback port Port, reached as HostAlias:Port.
	RuleHost
)

// String returns "name", "cidr" or "host".
func (k RuleKind) String() string {
	switch k {
	case RuleName:
		return "name"
	case RuleCIDR:
		return "cidr"
	case RuleHost:
		return "host"
	}
	return "RuleKind(" + strconv.Itoa(int(k)) + ")"
}

// Rule is one allowed destination.
type Rule struct {
	Kind RuleKind
	// Name (RuleName only): lowercase ASCII FQDN without trailing dot, or
	// "*.suffix" for any name strictly below suffix.
	Name string
	// Port: TCP port 1..65535. For RuleName, 0 means ports 80 and 443.
	Port uint16
	// Prefix (RuleCIDR only): masked address range; IPv4 or IPv6, never 4-in-6.
	Prefix netip.Prefix
}

// String returns the canonical DEST form: "example.com", "example.com:8443",
// "198.51.100.0/24:80", "[2001:db8::]/32:443", "host:5432". Parse(String())
// returns the same Rule.
func (r Rule) String() string {
	switch r.Kind {
	case RuleName:
		if r.Port == 0 {
			return r.Name
		}
		return r.Name + ":" + strconv.Itoa(int(r.Port))
	case RuleCIDR:
		return prefixString(r.Prefix) + ":" + strconv.Itoa(int(r.Port))
	case RuleHost:
		return "host:" + strconv.Itoa(int(r.Port))
	}
	return "invalid rule"
}

// Ports returns the TCP ports the rule allows: 80 and 443 for a bare name,
// otherwise Port.
func (r Rule) Ports() []uint16 {
	if r.Kind == RuleName && r.Port == 0 {
		return []uint16{80, 443}
	}
	return []uint16{r.Port}
}

// MatchName reports whether a RuleName rule covers name (any case, trailing
// dot allowed), ignoring the port. It is false for other kinds.
func (r Rule) MatchName(name string) bool {
	if r.Kind != RuleName {
		return false
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if suffix, ok := strings.CutPrefix(r.Name, "*"); ok { // suffix is ".example.com"
		return len(name) > len(suffix) && strings.HasSuffix(name, suffix)
	}
	return name == r.Name
}

// MarshalText returns String().
func (r Rule) MarshalText() ([]byte, error) {
	if r.Kind < RuleName || r.Kind > RuleHost {
		return nil, fmt.Errorf("%w: rule of kind %v cannot be written", ErrInvalid, r.Kind)
	}
	return []byte(r.String()), nil
}

// UnmarshalText parses a DEST with ParseRule.
func (r *Rule) UnmarshalText(b []byte) error {
	v, err := ParseRule(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Policy is a sandbox's network policy. Its JSON form is
// {"mode":"allowlist","allow":["example.com:443","198.51.100.0/24:8080","host:5432"]},
// with "dns":"strict" and "block_private":true when set (options.go);
// unmarshaling validates it as Parse and Validate do.
type Policy struct {
	Mode  Mode   `json:"mode"`
	Allow []Rule `json:"allow,omitempty"`
	// DNS is how the host resolves names for the sandbox (DNSDefault or
	// DNSStrict; options.go).
	DNS DNSMode `json:"dns,omitempty"`
	// BlockPrivate keeps the sandbox from private (RFC 1918), CGNAT and
	// ULA destinations in every mode (options.go); the daemon sets it
	// for a tenant's sandbox unless the operator opens them.
	BlockPrivate bool `json:"block_private,omitempty"`
}

// UnmarshalJSON decodes the JSON form and validates it with Parse and
// the options' checks (Validate).
func (p *Policy) UnmarshalJSON(b []byte) error {
	var raw struct {
		Mode         string   `json:"mode"`
		Allow        []string `json:"allow"`
		DNS          string   `json:"dns"`
		BlockPrivate bool     `json:"block_private"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	v, err := Parse(raw.Mode, raw.Allow)
	if err != nil {
		return err
	}
	if v, err = v.withOptions(raw.DNS, raw.BlockPrivate); err != nil {
		return err
	}
	*p = v
	return nil
}

// MaxRules is the most --allow rules one policy may have (after duplicates
// are dropped): each becomes firewall rules, egress listeners or resolver
// entries on the host, so a tenant's create may not ask for an unbounded
// number of them. Parse refuses more with ErrTooManyRules.
const MaxRules = 256

// ErrTooManyRules is wrapped by Parse's refusal of a policy with more than
// MaxRules distinct rules (400 invalid_argument; also ErrInvalid).
var ErrTooManyRules = errdefs.New(errdefs.ErrInvalidArgument, "", "too many network rules")

// Parse builds a Policy from a mode ("" = none) and the --allow DESTs (forms in
// the package doc). Duplicate rules are dropped; order is kept otherwise. Its
// time is linear in the number of DESTs, and it stops at the first DEST past
// MaxRules distinct rules.
//
// Errors (all wrap ErrInvalid): a malformed DEST; --allow with mode none; NAME
// or CIDR rules with mode open (open already reaches them; only host:PORT is
// accepted there); a CIDR that covers loopback, link-local (169.254.0.0/16,
// fe80::/10), multicast, 0.0.0.0/8, ::/128 or a cloud metadata address (so
// 0.0.0.0/0 and ::/0 are refused: use mode open); port 53 for a name or
// host:PORT (the sandbox's resolver owns it); a host:PORT whose port is
// also a name rule's port (both would need that port at the host side of the
// tap); more than MaxRules distinct rules (also ErrTooManyRules). An
// allowlist with no rules is valid: nothing is reachable.
func Parse(mode string, allow []string) (Policy, error) {
	m, err := ParseMode(mode)
	if err != nil {
		return Policy{}, err
	}
	p := Policy{Mode: m}
	if m == ModeNone && len(allow) > 0 {
		return Policy{}, fmt.Errorf("%w: --allow %s needs a network: add --network allowlist (or open for host:PORT)", ErrInvalid, allow[0])
	}
	seen := make(map[Rule]struct{}, min(len(allow), MaxRules))
	for _, s := range allow {
		r, err := ParseRule(s)
		if err != nil {
			return Policy{}, err
		}
		if m == ModeOpen && r.Kind != RuleHost {
			return Policy{}, fmt.Errorf("%w: --allow %s: network open already reaches every outside destination; only host:PORT rules can be added, or use --network allowlist", ErrInvalid, s)
		}
		if _, dup := seen[r]; dup {
			continue
		}
		if len(p.Allow) == MaxRules {
			return Policy{}, fmt.Errorf("%w: %w: more than %d distinct --allow rules (at --allow %s): a policy has at most %d; use wider names (*.example.com) or ranges, or --network open", ErrInvalid, ErrTooManyRules, MaxRules, s, MaxRules)
		}
		seen[r] = struct{}{}
		p.Allow = append(p.Allow, r)
	}
	namePorts := map[uint16]Rule{}
	for _, r := range p.Allow {
		if r.Kind == RuleName {
			for _, port := range r.Ports() {
				if _, ok := namePorts[port]; !ok {
					namePorts[port] = r
				}
			}
		}
	}
	for _, r := range p.Allow {
		if r.Kind != RuleHost {
			continue
		}
		if n, ok := namePorts[r.Port]; ok {
			return Policy{}, fmt.Errorf("%w: --allow %s and --allow %s both need port %d at %s: move the host service to another port", ErrInvalid, r, n, r.Port, HostAlias)
		}
	}
	return p, nil
}

// Validate checks p as Parse would, and its options as WithDNS and
// WithPrivateBlocked do (for a Policy built by hand or read from storage).
func (p Policy) Validate() error {
	v, err := Parse(string(p.Mode), p.Strings())
	if err != nil {
		return err
	}
	_, err = v.withOptions(string(p.DNS), p.BlockPrivate)
	return err
}

// Strings returns the canonical DEST strings of p.Allow.
func (p Policy) Strings() []string {
	out := make([]string, len(p.Allow))
	for i, r := range p.Allow {
		out[i] = r.String()
	}
	return out
}

// String returns "none", "open", or "allowlist[example.com host:5432]",
// followed by the options that are set: " dns=strict", " private=blocked"
// (as in "open private=blocked").
func (p Policy) String() string {
	m := p.Mode
	if m == "" {
		m = ModeNone
	}
	s := string(m)
	if len(p.Allow) > 0 {
		s += "[" + strings.Join(p.Strings(), " ") + "]"
	}
	return s + p.optionsString()
}

// HasNIC reports whether the sandbox gets a network device (mode is not none).
func (p Policy) HasNIC() bool { return p.Mode == ModeAllowlist || p.Mode == ModeOpen }

// TCPPorts returns, sorted and without duplicates, the TCP ports the egress
// service listens on at the host side of the tap: 80 and 443 for each bare
// name, each NAME:PORT port, each host:PORT port. DNS (53) is not included.
func (p Policy) TCPPorts() []uint16 {
	var out []uint16
	for _, r := range p.Allow {
		if r.Kind == RuleName || r.Kind == RuleHost {
			out = append(out, r.Ports()...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// NamePorts returns, sorted and without duplicates, the ports of name rules
// (80 and 443 for a bare name): where the egress proxy checks SNI/Host.
func (p Policy) NamePorts() []uint16 {
	var out []uint16
	for _, r := range p.Allow {
		if r.Kind == RuleName {
			out = append(out, r.Ports()...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// HostPorts returns, sorted and without duplicates, the host:PORT ports: the
// host loopback ports exposed to the guest as HostAlias:PORT.
func (p Policy) HostPorts() []uint16 {
	var out []uint16
	for _, r := range p.Allow {
		if r.Kind == RuleHost {
			out = append(out, r.Port)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// CIDRRules returns the RuleCIDR rules in policy order (for the firewall and NAT).
func (p Policy) CIDRRules() []Rule {
	var out []Rule
	for _, r := range p.Allow {
		if r.Kind == RuleCIDR {
			out = append(out, r)
		}
	}
	return out
}

// Names returns the name patterns of RuleName rules ("example.com",
// "*.example.org"), sorted and without duplicates.
func (p Policy) Names() []string {
	var out []string
	for _, r := range p.Allow {
		if r.Kind == RuleName {
			out = append(out, r.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// AllowsName reports whether some name rule covers name on any port (what the
// egress resolver answers). HostAlias is not a name rule: callers handle it.
func (p Policy) AllowsName(name string) bool {
	for _, r := range p.Allow {
		if r.MatchName(name) {
			return true
		}
	}
	return false
}

// AllowsNamePort reports whether some name rule covers name on TCP port
// (what the egress proxy checks against SNI/Host).
func (p Policy) AllowsNamePort(name string, port uint16) bool {
	for _, r := range p.Allow {
		if r.MatchName(name) && slices.Contains(r.Ports(), port) {
			return true
		}
	}
	return false
}

// refused are ranges no CIDR rule may overlap: the host's loopback, link-local
// (where 169.254.169.254 metadata lives), multicast, "this network", the
// unspecified address, and cloud metadata addresses outside link-local
// (AWS IPv6 fd00:ec2::254, Alibaba 100.100.100.200).
var refused = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "0.0.0.0/8 (this network)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback 127.0.0.0/8"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local 169.254.0.0/16 (metadata 169.254.169.254)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast 224.0.0.0/4"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast 255.255.255.255"},
	{netip.MustParsePrefix("100.100.100.200/32"), "metadata address 100.100.100.200"},
	{netip.MustParsePrefix("::/128"), "the unspecified address ::"},
	{netip.MustParsePrefix("::1/128"), "loopback ::1"},
	{netip.MustParsePrefix("fe80::/10"), "link-local fe80::/10"},
	{netip.MustParsePrefix("ff00::/8"), "multicast ff00::/8"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata address fd00:ec2::254"},
}

// ParseRule parses one DEST (forms in the package doc). Errors wrap ErrInvalid
// and say what to write instead.
func ParseRule(dest string) (Rule, error) {
	s := strings.TrimSpace(dest)
	bad := func(format string, a ...any) (Rule, error) {
		return Rule{}, fmt.Errorf("%w: --allow %q: "+format, append([]any{ErrInvalid, dest}, a...)...)
	}
	if s == "" {
		return bad("empty destination: write NAME, NAME:PORT, CIDR:PORT or host:PORT")
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		return bad("%s", urlAdvice(scheme, rest))
	}
	// [IPv6]/LEN:PORT or [IPv6]:PORT
	if rest, ok := strings.CutPrefix(s, "["); ok {
		addrS, after, ok := strings.Cut(rest, "]")
		if !ok {
			return bad("missing ']': write [2001:db8::]/32:PORT")
		}
		addr, err := netip.ParseAddr(addrS)
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			return bad("%q is not an IPv6 address (brackets are for IPv6 only, without %%zone)", addrS)
		}
		bits := "128"
		if b, ok := strings.CutPrefix(after, "/"); ok {
			bits, after, _ = strings.Cut(b, ":")
			if strings.Contains(b, ":") {
				after = ":" + after
			}
		}
		portS, ok := strings.CutPrefix(after, ":")
		if !ok || portS == "" {
			if after != "" && after != ":" {
				return bad("unexpected %q after ']': write [2001:db8::]/32:PORT", after)
			}
			return bad("needs a port: %s:PORT", strings.TrimSuffix(s, ":"))
		}
		return cidrRule(dest, addrS+"/"+bits, portS)
	}
	if strings.Count(s, ":") > 1 { // unbracketed IPv6
		if _, err := netip.ParsePrefix(s); err == nil {
			return bad("write an IPv6 range in brackets with a port: [%s]/%s:PORT", strings.Split(s, "/")[0], strings.Split(s, "/")[1])
		}
		if _, err := netip.ParseAddr(s); err == nil {
			return bad("write an IPv6 address in brackets with a port: [%s]:PORT", s)
		}
		return bad("not a destination: write NAME, NAME:PORT, CIDR:PORT, [IPv6]/LEN:PORT or host:PORT")
	}
	host, portS, hasPort := strings.Cut(s, ":")
	if hasPort && portS == "" {
		return bad("empty port after ':'")
	}
	if strings.EqualFold(host, "host") {
		if !hasPort {
			return bad("host needs a port: host:PORT exposes the host's 127.0.0.1:PORT as %s:PORT", HostAlias)
		}
		port, err := parsePort(portS)
		if err != nil {
			return bad("%v", err)
		}
		if port == 53 {
			return bad("port 53 at %s is the sandbox's resolver: expose the host service on another port", HostAlias)
		}
		return Rule{Kind: RuleHost, Port: port}, nil
	}
	if strings.Contains(host, "/") {
		if !hasPort {
			return bad("needs a port: %s:PORT", host)
		}
		return cidrRule(dest, host, portS)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		if !hasPort {
			return bad("needs a port: %s:PORT", host)
		}
		return cidrRule(dest, host+"/32", portS)
	}
	name, err := parseName(host)
	if err != nil {
		return bad("%v", err)
	}
	r := Rule{Kind: RuleName, Name: name}
	if hasPort {
		if r.Port, err = parsePort(portS); err != nil {
			return bad("%v", err)
		}
		if r.Port == 53 {
			return bad("port 53 is the sandbox's resolver and cannot be proxied by name; use CIDR:53 for an outside DNS server")
		}
	}
	return r, nil
}

func cidrRule(dest, prefix, portS string) (Rule, error) {
	bad := func(format string, a ...any) (Rule, error) {
		return Rule{}, fmt.Errorf("%w: --allow %q: "+format, append([]any{ErrInvalid, dest}, a...)...)
	}
	pfx, err := netip.ParsePrefix(prefix)
	if err != nil {
		return bad("%q is not an address range: write 198.51.100.0/24:PORT or [2001:db8::]/32:PORT", prefix)
	}
	if pfx.Addr().Is4In6() {
		return bad("write the IPv4-mapped address %s in IPv4 form", pfx.Addr())
	}
	if m := pfx.Masked(); m != pfx {
		return bad("%s has bits set past /%d: write %s:%s", prefix, pfx.Bits(), prefixString(m), portS)
	}
	port, err := parsePort(portS)
	if err != nil {
		return bad("%v", err)
	}
	if inLoopback(pfx) {
		return bad("the host's loopback is reached with host:PORT (as %s:PORT): --allow host:%d", HostAlias, port)
	}
	for _, r := range refused {
		if pfx.Overlaps(r.prefix) {
			return bad("the range covers %s, which a sandbox may never reach; list narrower ranges, or use --network open for the whole outside", r.what)
		}
	}
	if what, ok := neverEmbedded(pfx); ok { // addrclass.go: NAT64, 6to4, ...
		return bad("the range covers %s, which a sandbox may never reach; list narrower ranges", what)
	}
	return Rule{Kind: RuleCIDR, Prefix: pfx, Port: port}, nil
}

// inLoopback reports whether all of p lies in the host's loopback
// (127.0.0.0/8 or ::1): a destination host:PORT serves, unlike a range that
// merely overlaps loopback (0.0.0.0/0), which is refused as too wide.
func inLoopback(p netip.Prefix) bool {
	lo := netip.MustParsePrefix("127.0.0.0/8")
	if p.Addr().Is6() {
		lo = netip.MustParsePrefix("::1/128")
	}
	return p.Bits() >= lo.Bits() && lo.Contains(p.Addr())
}

// urlAdvice is the error text for a DEST written as a URL (scheme://rest):
// the host part, with its port if the URL has one, is what --allow wants.
func urlAdvice(scheme, rest string) string {
	host := rest
	if i := strings.IndexAny(host, "/?#"); i >= 0 {
		host = host[:i]
	}
	if _, after, ok := strings.Cut(host, "@"); ok {
		host = after
	}
	name, port, hasPort := strings.Cut(host, ":")
	if strings.HasPrefix(host, "[") || name == "" {
		return fmt.Sprintf("give a host name, not a URL (%s://...): --allow NAME (or NAME:PORT)", scheme)
	}
	if hasPort && port != "" {
		return fmt.Sprintf("give a host name, not a URL: --allow %s:%s (or --allow %s for TCP 80 and 443)", name, port, name)
	}
	return fmt.Sprintf("give a host name, not a URL: --allow %s (or %s:PORT)", name, name)
}

// prefixString writes IPv4 as 198.51.100.0/24 and IPv6 as [2001:db8::]/32.
func prefixString(p netip.Prefix) string {
	if p.Addr().Is6() {
		return "[" + p.Addr().String() + "]/" + strconv.Itoa(p.Bits())
	}
	return p.String()
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q: want a number 1..65535", s)
	}
	return uint16(n), nil
}

// parseName validates an ASCII host name (letters, digits, '-', labels of
// 1..63 bytes, 253 bytes in all, not all-numeric at the end) with an optional
// leading "*." and returns it lowercased without a trailing dot.
func parseName(s string) (string, error) {
	name := strings.ToLower(strings.TrimSuffix(s, "."))
	base, wild := strings.CutPrefix(name, "*.")
	if base == "" {
		return "", fmt.Errorf("empty name")
	}
	if len(base) > 253 {
		return "", fmt.Errorf("name is %d bytes long: at most 253", len(base))
	}
	labels := strings.Split(base, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", fmt.Errorf("name %q: each dot-separated label needs 1..63 characters", s)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("name %q: a label cannot start or end with '-'", s)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				if c == '*' {
					return "", fmt.Errorf("name %q: '*' is only allowed as a whole first label (*.example.com)", s)
				}
				if c >= 0x80 {
					return "", fmt.Errorf("name %q: write internationalized names in punycode (xn--...)", s)
				}
				return "", fmt.Errorf("name %q: only letters, digits, '-' and '.' are allowed", s)
			}
		}
	}
	if tld := labels[len(labels)-1]; strings.Trim(tld, "0123456789") == "" {
		return "", fmt.Errorf("%q is neither a name nor an IP address", s)
	}
	if wild && len(labels) < 2 {
		return "", fmt.Errorf("name %q: a wildcard needs at least two labels after '*.' (*.example.com)", s)
	}
	if base == HostAlias || strings.HasSuffix(base, "."+HostAlias) || (wild && strings.HasSuffix(HostAlias, "."+base)) {
		return "", fmt.Errorf("%s is reserved: use host:PORT to expose a host port", HostAlias)
	}
	if base == "localhost" || strings.HasSuffix(base, ".localhost") {
		return "", fmt.Errorf("localhost names are the guest's own loopback: use host:PORT to reach the host")
	}
	return name, nil
}
