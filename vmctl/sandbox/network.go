package sandbox

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/network"
	"github.com/agentbox/agentbox/vmctl/revert"
)

// NetworkProvider gives sandboxes whose policy is not none their network
// and takes it away again. vmctl/network.Manager implements it (tap, /30,
// nftables rules, egress service). Methods are called from many goroutines.
type NetworkProvider interface {
	// Setup makes sandbox id's network for policy before its domain
	// starts, with the traffic from the guest capped at outBytesPerSec
	// when it is not 0, and returns the attachment (tap, MAC, addresses,
	// the cap and whether it is in force). On error nothing is left.
	Setup(ctx context.Context, id string, policy netpolicy.Policy, outBytesPerSec uint64) (network.Attachment, error)
	// Adopt takes over the network of a sandbox whose domain survived a
	// daemon restart (its firewall rules and egress service again).
	Adopt(ctx context.Context, id string, att network.Attachment, policy netpolicy.Policy) error
	// Teardown removes sandbox id's network once its domain is gone;
	// idempotent.
	Teardown(ctx context.Context, id string) error
	// Sweep removes the network leftovers of every sandbox keep rejects
	// and says what it removed.
	Sweep(ctx context.Context, keep func(id string) bool) ([]string, error)
}

// NetworkRecord is a sandbox's network in its durable record.
type NetworkRecord struct {
	// Policy is the sandbox's network policy (mode and allowed
	// destinations).
	Policy netpolicy.Policy `json:"policy"`
	// Attachment is the tap, MAC and addresses the sandbox got; zero for
	// mode none.
	Attachment *network.Attachment `json:"attachment,omitempty"`
}

// netAttach is a Manager's side of its sandboxes' networks: their set-up,
// adoption, teardown and the sweep of leftovers through the
// NetworkProvider. It is a part of the Manager it points to
// (linkedManager).
type netAttach struct{ *Manager }

var netCmdlineRE = regexp.MustCompile(`\s*\bagentbox\.net=\S*`)

// attachNetwork gives sb its network for policy: with a policy other than
// none it sets up the provider's network (undone by undo on a later
// failure; the traffic from the guest capped at its record's
// NetBytesPerSec, the create's or, for a restore, its source's), adds the domain's <interface> to spec and the agentbox.net=
// word to its kernel command line (replacing one already there, as in a
// restored snapshot's spec), and records both in sb's record. Mode none
// (or the zero policy) records the policy and removes any interface from
// spec. Errors: ErrInvalid when the policy needs a network and the
// manager has no provider; the provider's errors.
func (m *netAttach) attachNetwork(ctx context.Context, sb *Sandbox, policy netpolicy.Policy, spec *domain.Spec, undo *revert.List) error {
	if policy.Mode == "" {
		policy.Mode = netpolicy.ModeNone
	}
	spec.Cmdline = strings.TrimSpace(netCmdlineRE.ReplaceAllString(spec.Cmdline, ""))
	spec.Interface = nil
	rec := &NetworkRecord{Policy: policy}
	if policy.HasNIC() {
		if m.cfg.Network == nil {
			return fmt.Errorf("%w: network %s needs the host's network support, which this agentbox was started without (run as root through agentbox serve)", ErrInvalid, policy.Mode)
		}
		att, err := m.cfg.Network.Setup(ctx, sb.ID, policy, sb.outBytesPerSec())
		if err != nil {
			return fmt.Errorf("network: %w", err)
		}
		undo.Add("network", func(ctx context.Context) error { return m.cfg.Network.Teardown(ctx, sb.ID) })
		spec.Interface = &domain.Interface{Tap: att.Tap, MAC: att.MAC}
		spec.Cmdline += " " + att.Cmdline()
		rec.Attachment = &att
	}
	sb.mu.Lock()
	sb.rec.Network = rec
	sb.mu.Unlock()
	return nil
}

// guestNet is a sandbox's side of its network: its cap on the guest's
// traffic, its policy, the guest's configuration (ConfigureGuestNetwork).
// It is a part of the Sandbox it points to (linked).
type guestNet struct{ *Sandbox }

// outBytesPerSec is the cap on the traffic from sb's guest: its
// resources' network cap (0: none).
func (sb *guestNet) outBytesPerSec() uint64 {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if r := sb.rec.Resources; r != nil && r.NetBytesPerSec > 0 {
		return uint64(r.NetBytesPerSec)
	}
	return 0
}

// teardownNetwork removes sb's network (if it has one) once its domain is
// gone. Errors are logged: the firewall's catch-all rules keep a leftover
// tap closed and the next daemon start sweeps it.
func (m *netAttach) teardownNetwork(ctx context.Context, sb *Sandbox) {
	r := sb.Record()
	if m.cfg.Network == nil || r.Network == nil || r.Network.Attachment == nil {
		return
	}
	if err := m.cfg.Network.Teardown(context.WithoutCancel(ctx), sb.ID); err != nil {
		m.log.Warn("network teardown", "sandbox", sb.ID, "err", err)
	}
}

// adoptNetwork re-establishes the network of an adopted sandbox. A failure
// is logged and leaves the sandbox without network (its tap stays closed
// by the catch-all rules).
func (m *netAttach) adoptNetwork(ctx context.Context, sb *Sandbox) {
	r := sb.Record()
	if r.Network == nil || r.Network.Attachment == nil {
		return
	}
	if m.cfg.Network == nil {
		m.log.Warn("adopted sandbox has a network but this daemon has no network support: it stays without network", "sandbox", sb.ID)
		return
	}
	if err := m.cfg.Network.Adopt(ctx, sb.ID, *r.Network.Attachment, r.Network.Policy); err != nil {
		m.log.Warn("adopt sandbox network: it stays without network", "sandbox", sb.ID, "err", err)
	}
}

// sweepNetwork removes network leftovers of sandboxes that are not alive
// in the registry.
func (m *netAttach) sweepNetwork(ctx context.Context) {
	if m.cfg.Network == nil {
		return
	}
	if _, err := m.cfg.Network.Sweep(ctx, func(id string) bool {
		sb, err := m.Get(id)
		return err == nil && !sb.State().Final()
	}); err != nil {
		m.log.Warn("sweep network leftovers", "err", err)
	}
}

// ConfigureGuestNetwork tells the guest agent its network again (address,
// gateway, resolver), e.g. after a snapshot restore gave the sandbox a new
// subnet. The NIC is chosen by MAC unless anyMAC (a restored guest keeps
// its source's MAC in the NIC's migrated state: pass true there). A
// sandbox without a network is a no-op. Errors: ErrNotRunning; the
// agent's.
func (sb *guestNet) ConfigureGuestNetwork(ctx context.Context, anyMAC bool) error {
	r := sb.Record()
	if r.Network == nil || r.Network.Attachment == nil {
		return nil
	}
	c := sb.Agent()
	if c == nil {
		return sb.NotRunning()
	}
	cfg := r.Network.Attachment.GuestConfig()
	if anyMAC {
		cfg.MAC = ""
	}
	return c.ConfigureNetwork(ctx, agentproto.NetworkRequest(cfg))
}

// NetworkPolicy returns the sandbox's network policy (mode none when it
// has none recorded).
func (sb *guestNet) NetworkPolicy() netpolicy.Policy {
	r := sb.Record()
	if r.Network == nil {
		return netpolicy.Policy{Mode: netpolicy.ModeNone}
	}
	return r.Network.Policy
}

// SetNetwork gives the manager its network provider after NewManager (an
// in-process `agentbox run` makes one only when its policy needs it). Call
// it before Create.
func (m *netAttach) SetNetwork(p NetworkProvider) { m.cfg.Network = p }

// UseGuestMAC makes the build's NIC carry mac: the domain's interface,
// the agentbox.net= word of its kernel command line and the record's
// attachment. A restore calls it after StepNetwork, because the NIC's
// saved device state keeps the MAC of the domain the snapshot was saved
// from (see vmctl/sandbox/snapshot). Without a NIC it does nothing.
func (b *Build) UseGuestMAC(mac string) {
	spec, sb := &b.Spec, b.Sandbox
	if spec.Interface == nil || mac == "" {
		return
	}
	spec.Interface.MAC = mac
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if n := sb.rec.Network; n != nil && n.Attachment != nil {
		att := *n.Attachment
		att.MAC = mac
		sb.rec.Network = &NetworkRecord{Policy: n.Policy, Attachment: &att}
		spec.Cmdline = strings.TrimSpace(netCmdlineRE.ReplaceAllString(spec.Cmdline, "")) + " " + att.Cmdline()
	}
}
