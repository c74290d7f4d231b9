package network

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"sync"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// DefaultPool is the address range sandboxes' /30 subnets come from when
// the daemon's configuration names none: 16384 sandboxes.
var DefaultPool = netip.MustParsePrefix("10.213.0.0/16")

// SubnetBits is the prefix length of a sandbox's subnet: a /30 has exactly
// a host side (first usable address) and a guest side (second).
const SubnetBits = 30

// ErrPoolExhausted is returned when no /30 of the pool is free. It is of
// errdefs.ErrInternal, not ErrResourceExhausted: a create that finds the
// pool full fails its network step, answered 500 internal as it always
// was (429 capacity_exceeded is admission's, with its numbers).
var ErrPoolExhausted = errdefs.New(errdefs.ErrInternal, "", "network address pool exhausted")

// pool hands out /30 subnets of a prefix. Allocations are kept in memory
// (the daemon's records hold them across restarts; Manager.Adopt puts them
// back); a subnet that overlaps an address the host already has (another
// daemon's tap, a VPN) is skipped.
type pool struct {
	prefix netip.Prefix
	mu     sync.Mutex
	used   map[netip.Prefix]string // subnet → sandbox id
}

func newPool(prefix netip.Prefix) (*pool, error) {
	if !prefix.Addr().Is4() || prefix.Bits() > SubnetBits {
		return nil, fmt.Errorf("network pool %s: want an IPv4 prefix of at most /%d, e.g. %s", prefix, SubnetBits, DefaultPool)
	}
	return &pool{prefix: prefix.Masked(), used: map[netip.Prefix]string{}}, nil
}

// size is the number of /30 subnets in the pool.
func (p *pool) size() int { return 1 << (SubnetBits - p.prefix.Bits()) }

// nth returns the pool's i-th /30.
func (p *pool) nth(i int) netip.Prefix {
	a := p.prefix.Addr().As4()
	base := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v := base + uint32(i)<<(32-SubnetBits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), SubnetBits)
}

// allocate reserves a free /30 for id. The search starts at a position
// derived from id, so two daemons sharing a pool rarely probe the same
// subnet at once; taken(subnet) reports subnets in use outside this pool
// (addresses on host interfaces).
func (p *pool) allocate(id string, taken func(netip.Prefix) bool) (netip.Prefix, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := fnv.New32a()
	h.Write([]byte(id))
	n := p.size()
	start := int(h.Sum32() % uint32(n))
	for k := range n {
		s := p.nth((start + k) % n)
		if _, ok := p.used[s]; ok || taken(s) {
			continue
		}
		p.used[s] = id
		return s, nil
	}
	return netip.Prefix{}, fmt.Errorf("%w: every /%d of %s is in use: remove sandboxes or configure a larger [network] pool", ErrPoolExhausted, SubnetBits, p.prefix)
}

// claim records an existing allocation (an adopted sandbox).
func (p *pool) claim(id string, s netip.Prefix) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used[s.Masked()] = id
}

// release frees id's subnet, if any.
func (p *pool) release(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s, owner := range p.used {
		if owner == id {
			delete(p.used, s)
		}
	}
}

// hostSide and guestSide return the first and second usable address of a /30.
func hostSide(s netip.Prefix) netip.Addr  { return s.Addr().Next() }
func guestSide(s netip.Prefix) netip.Addr { return s.Addr().Next().Next() }
