package sandbox

import (
	"strings"

	"github.com/agentbox/agentbox/vmctl/domain"
)

// keepGuestMAC makes a restored sandbox's domain and record carry the MAC
// its guest really has. A virtio-net NIC's MAC is part of its saved
// device state (QEMU's virtio-net vmstate carries the MAC the guest
// sees), so after the snapshot is loaded the guest NIC keeps the MAC of
// the domain the snapshot was saved from, whatever the new domain's XML
// says. attachNetwork gave spec and sb's record the provider's MAC for
// the new sandbox; when the saved spec had a NIC, both get the saved
// MAC back instead: `inspect` then shows the guest's real MAC, the
// domain XML agrees with the device state, and a snapshot of this
// sandbox passes it on again. Nothing on the host keys on the MAC (the
// firewall rules match the tap, each sandbox has its own /30), so two
// forks with one MAC do not collide. Call it after attachNetwork.
func keepGuestMAC(sb *Sandbox, saved domain.Spec, spec *domain.Spec) {
	if saved.Interface == nil || saved.Interface.MAC == "" || spec.Interface == nil {
		return
	}
	mac := saved.Interface.MAC
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
