package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/revert"
)

// DefaultTable is the nftables table (family inet) of a daemon whose
// configuration names none.
const DefaultTable = "agentbox"

var tableRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{0,30}$`)

// EgressFunc starts the egress service of one sandbox (vmctl/egress: a
// resolver on att.Host:53 answering only the policy's names, the SNI/Host
// checking proxy and the host:PORT forwarders on att.Host) and returns what
// stops it. The daemon wires egress.Start here.
type EgressFunc func(ctx context.Context, id string, att Attachment, policy netpolicy.Policy) (io.Closer, error)

// Config configures a Manager.
type Config struct {
	// Pool is the IPv4 range the sandboxes' /30 subnets come from; zero
	// means DefaultPool. Subnets overlapping an address of a host
	// interface are skipped.
	Pool netip.Prefix
	// Table is the nftables table (family inet) holding this daemon's
	// rules; empty means DefaultTable. Two daemons on one host need two
	// tables. Letters, digits and _, at most 31 bytes.
	Table string
	// Egress starts a sandbox's egress service; nil starts none (then
	// only CIDR rules and open mode carry traffic).
	Egress EgressFunc
	// Logger receives one line per setup and teardown (key: sandbox).
	Logger *slog.Logger
}

// Manager sets sandboxes' networks up and tears them down: tap, address,
// firewall rules and egress service. It is safe for concurrent use.
type Manager struct {
	cfg  Config
	log  *slog.Logger
	pool *pool
	fw   *firewall

	teardownMu sync.Mutex

	mu       sync.Mutex
	live     map[string]*attached
	fwdSet   bool // ip_forward was switched on (once per process)
	released bool // Release ran: Setup refuses (the table may be gone)
}

type attached struct {
	att    Attachment
	egress io.Closer
}

// New checks cfg, creates (or reuses) the firewall table and its base
// chains, and returns a Manager with no sandboxes. Errors: a bad pool or
// table name; no CAP_NET_ADMIN or no nf_tables in the kernel.
func New(cfg Config) (*Manager, error) {
	if !cfg.Pool.IsValid() {
		cfg.Pool = DefaultPool
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if !tableRE.MatchString(cfg.Table) {
		return nil, fmt.Errorf("network table %q: want a letter then letters, digits or _, at most 31 bytes", cfg.Table)
	}
	p, err := newPool(cfg.Pool)
	if err != nil {
		return nil, err
	}
	fw, err := openFirewall(cfg.Table)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, log: log, pool: p, fw: fw, live: map[string]*attached{}}, nil
}

// Table returns the nftables table name.
func (m *Manager) Table() string { return m.cfg.Table }

// errShutDown is Setup's error after Release.
var errShutDown = errors.New("the daemon's network is shut down: no new sandbox networks")

// Setup gives sandbox id a network for policy, before its domain starts:
// a /30, the firewall rules (installed before the tap exists, so the
// guest never sends a packet they do not see) with the cap of
// outBytesPerSec on the guest's traffic when it is not 0 (OutLimit), the
// tap with the host address, ip_forward when the policy forwards (CIDR
// rules or open), and the egress service. It returns the attachment for
// the domain's <interface> and the guest's command line, with the cap and
// whether it is in force (a kernel refusing nftables limit objects leaves
// the guest's traffic uncapped and Attachment.OutLimit says why; the
// other rules are in force). On error nothing is left. Errors: policy
// none (it has no network), IPv6 CIDR rules (not supported yet), a cap
// out of range (checkOutRate), an exhausted pool, netlink/nftables
// failures, Release already called.
func (m *Manager) Setup(ctx context.Context, id string, policy netpolicy.Policy, outBytesPerSec uint64) (_ Attachment, err error) {
	if !policy.HasNIC() {
		return Attachment{}, fmt.Errorf("network policy %s has no network device: nothing to set up", policy)
	}
	if err := checkOutRate(outBytesPerSec); err != nil {
		return Attachment{}, err
	}
	m.mu.Lock()
	released := m.released
	m.mu.Unlock()
	if released {
		return Attachment{}, errShutDown
	}
	for _, r := range policy.CIDRRules() {
		if !r.Prefix.Addr().Is4() {
			return Attachment{}, fmt.Errorf("--allow %s: IPv6 destinations are not supported yet (sandboxes get IPv4 only)", r)
		}
	}
	tap, err := TapName(id)
	if err != nil {
		return Attachment{}, err
	}
	mac, _ := MACFor(id)
	hostNets, err := hostPrefixes()
	if err != nil {
		return Attachment{}, err
	}
	subnet, err := m.pool.allocate(id, func(s netip.Prefix) bool {
		for _, h := range hostNets {
			if h.Overlaps(s) {
				return true
			}
		}
		return false
	})
	if err != nil {
		return Attachment{}, err
	}
	att := Attachment{Tap: tap, MAC: mac, Host: hostSide(subnet), Guest: guestSide(subnet), Bits: SubnetBits}
	undo := revert.New()
	defer undo.OnError(ctx, &err)
	undo.Add("subnet", func(context.Context) error { m.pool.release(id); return nil })

	if outBytesPerSec > 0 {
		att.OutLimit = &OutLimit{BytesPerSec: outBytesPerSec, Burst: OutBurst(outBytesPerSec)}
	}
	if att.OutLimit, err = m.install(id, att, policy); err != nil {
		return Attachment{}, err
	}
	undo.Add("firewall rules", func(context.Context) error { return m.fw.remove(id) })
	if err := createTap(tap, tapAlias(m.cfg.Table), m.fw.group, att.Host, att.Bits); err != nil {
		return Attachment{}, err
	}
	undo.Add("tap", func(context.Context) error { return deleteTap(tap) })
	if len(policy.CIDRRules()) > 0 || policy.Mode == netpolicy.ModeOpen {
		if err := m.enableForwarding(); err != nil {
			return Attachment{}, err
		}
	}
	a := &attached{att: att}
	if m.cfg.Egress != nil {
		a.egress, err = m.cfg.Egress(ctx, id, att, policy)
		if err != nil {
			return Attachment{}, fmt.Errorf("start egress service on %s: %w", att.Host, err)
		}
		if a.egress != nil {
			undo.Add("egress", func(context.Context) error { return a.egress.Close() })
		}
	}
	m.mu.Lock()
	if m.released {
		// Release may have deleted the table after this tap was made:
		// the tap must not outlive its rules.
		m.mu.Unlock()
		return Attachment{}, errShutDown
	}
	m.live[id] = a
	m.mu.Unlock()
	m.log.Info("sandbox network up", "sandbox", id, "tap", tap, "host", att.Host, "guest", att.Guest,
		"policy", policy.String(), "egress_ports", portsString(policy.TCPPorts()))
	return att, nil
}

// rules returns the firewall rules of a sandbox, with att's outbound cap
// if it has one in force (OutLimit). So Adopt installs the cap of an
// adopted sandbox again, and fails (the tap stays closed by the catch-all
// rules) rather than let it go uncapped; a cap the kernel refused at Setup
// is not tried again.
func (m *Manager) rules(id string, att Attachment, policy netpolicy.Policy) sandboxRules {
	var ports []uint16
	if m.cfg.Egress != nil {
		ports = policy.TCPPorts()
	}
	s := sandboxRules{id: id, tap: att.Tap, host: att.Host, guest: att.Guest, policy: policy, tcpPorts: ports}
	if l := att.OutLimit; l.Enforced() {
		s.outBps, s.outBurst = l.BytesPerSec, l.Burst
	}
	return s
}

// install installs a new sandbox's firewall rules with att's outbound cap
// and returns the cap as it now is (nil for none). When the kernel refuses
// the rules with the cap, they are installed without it and the cap says
// why.
func (m *Manager) install(id string, att Attachment, policy netpolicy.Policy) (*OutLimit, error) {
	s := m.rules(id, att, policy)
	err := m.fw.install(s)
	if att.OutLimit == nil {
		return nil, err
	}
	lim := *att.OutLimit
	lim.Table, lim.Object = m.cfg.Table, outObject(id)
	if err == nil {
		return &lim, nil
	}
	s.outBps = 0
	if err2 := m.fw.install(s); err2 != nil {
		return nil, err2 // not about the cap
	}
	lim.NotEnforced = "the kernel refused an nftables limit object (nft_limit): " + err.Error()
	m.log.Warn("outbound network cap not enforced", "sandbox", id, "err", err)
	return &lim, nil
}

// Adopt takes over the network of a sandbox whose domain survived a daemon
// restart, or of a sandbox paused to disk (no domain): it claims the
// subnet, rewrites the firewall rules (they live in the kernel, but the
// policy's rules may have changed shape between versions), makes the tap
// again with the same name and address when it is gone (a host reboot
// removes taps and rules; a sandbox paused to disk resumes on it) and
// starts the egress service again.
func (m *Manager) Adopt(ctx context.Context, id string, att Attachment, policy netpolicy.Policy) (err error) {
	m.pool.claim(id, att.Subnet())
	undo := revert.New()
	defer undo.OnError(ctx, &err)
	undo.Add("subnet", func(context.Context) error { m.pool.release(id); return nil })
	if err := m.fw.install(m.rules(id, att, policy)); err != nil {
		return err
	}
	if !tapExists(att.Tap) {
		if err := createTap(att.Tap, tapAlias(m.cfg.Table), m.fw.group, att.Host, att.Bits); err != nil {
			return fmt.Errorf("make tap %s of sandbox %s again: %w", att.Tap, id, err)
		}
		undo.Add("tap", func(context.Context) error { return deleteTap(att.Tap) })
		m.log.Info("sandbox tap made again", "sandbox", id, "tap", att.Tap, "host", att.Host)
	}
	if len(policy.CIDRRules()) > 0 || policy.Mode == netpolicy.ModeOpen {
		if err := m.enableForwarding(); err != nil {
			return err
		}
	}
	a := &attached{att: att}
	if m.cfg.Egress != nil {
		if a.egress, err = m.cfg.Egress(ctx, id, att, policy); err != nil {
			return fmt.Errorf("start egress service on %s: %w", att.Host, err)
		}
	}
	m.mu.Lock()
	m.live[id] = a
	m.mu.Unlock()
	m.log.Info("sandbox network adopted", "sandbox", id, "tap", att.Tap)
	return nil
}

// Teardown removes sandbox id's egress service, firewall rules and tap and
// frees its subnet. Call it once the domain is gone (the catch-all rules
// keep a tap closed even if it were not). Tearing down an unknown or
// already torn-down sandbox only removes what is left of it; its errors are
// joined.
func (m *Manager) Teardown(ctx context.Context, id string) error {
	// One teardown at a time: the domain's stop event and the remove that
	// caused it both ask.
	m.teardownMu.Lock()
	defer m.teardownMu.Unlock()
	m.mu.Lock()
	a := m.live[id]
	delete(m.live, id)
	m.mu.Unlock()
	var errs []error
	if a != nil && a.egress != nil {
		if err := a.egress.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stop egress service: %w", err))
		}
	}
	if err := m.fw.remove(id); err != nil {
		errs = append(errs, err)
	}
	if tap, err := TapName(id); err == nil {
		if err := deleteTap(tap); err != nil {
			errs = append(errs, err)
		}
	}
	m.pool.release(id)
	if a != nil {
		m.log.Info("sandbox network down", "sandbox", id, "tap", a.att.Tap)
	}
	return errors.Join(errs...)
}

// Sweep removes the rules and taps of every sandbox in this manager's
// table that keep does not name (sandboxes of a record that is gone, or
// left by a daemon killed mid-teardown) and returns what it removed
// ("rules ID", "tap NAME"). The daemon calls it once after reconciling.
func (m *Manager) Sweep(ctx context.Context, keep func(id string) bool) ([]string, error) {
	var removed []string
	var errs []error
	ids, err := m.fw.sandboxes()
	if err != nil {
		errs = append(errs, err)
	}
	for _, id := range ids {
		if keep(id) {
			continue
		}
		if err := m.fw.remove(id); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "rules "+id)
	}
	taps, err := listTaps(tapAlias(m.cfg.Table))
	if err != nil {
		errs = append(errs, err)
	}
	for _, t := range taps {
		if keep(strings.TrimPrefix(t, TapPrefix)) {
			continue
		}
		if err := deleteTap(t); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "tap "+t)
	}
	for _, r := range removed {
		m.log.Warn("removed a network leftover no sandbox uses", "what", r)
	}
	return removed, errors.Join(errs...)
}

// Close stops every egress service this manager started; taps and rules
// stay for the sandboxes, which outlive the daemon (the next one adopts
// them). Release also deletes the table when no sandbox needs it.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, a := range m.live {
		if a.egress != nil {
			errs = append(errs, a.egress.Close())
		}
	}
	m.live = map[string]*attached{}
	return errors.Join(errs...)
}

// Destroy tears every known sandbox's network down and deletes the table
// (tests; a daemon that stops its sandboxes on exit).
func (m *Manager) Destroy(ctx context.Context) error {
	m.mu.Lock()
	var ids []string
	for id := range m.live {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, m.Teardown(ctx, id))
	}
	_, err := m.Sweep(ctx, func(string) bool { return false })
	errs = append(errs, err, m.fw.destroy())
	return errors.Join(errs...)
}

// ipForwardPath is the sysctl that lets the host route between the taps
// and its other interfaces.
const ipForwardPath = "/proc/sys/net/ipv4/ip_forward"

// enableForwarding sets net.ipv4.ip_forward=1 if it is not, and logs it:
// CIDR rules and open mode route the guest's packets through the host.
// The firewall's forward chain keeps the taps to their policy; it does not
// filter forwarding between the host's other interfaces, which this
// switch also enables (a NixOS host sets it in its configuration).
func (m *Manager) enableForwarding() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := os.ReadFile(ipForwardPath)
	if err != nil {
		return fmt.Errorf("read %s: %w", ipForwardPath, err)
	}
	if strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := os.WriteFile(ipForwardPath, []byte("1"), 0); err != nil {
		return fmt.Errorf("enable IPv4 forwarding for a policy with CIDR rules or open (set net.ipv4.ip_forward=1 on the host): %w", err)
	}
	if !m.fwdSet {
		m.log.Warn("enabled net.ipv4.ip_forward=1 for a sandbox network policy that routes (CIDR rules or open)")
		m.fwdSet = true
	}
	return nil
}
