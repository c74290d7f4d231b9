package domain

import (
	"fmt"
	"net"
	"regexp"

	"libvirt.org/go/libvirtxml"
)

// Interface is the sandbox's one network device: a virtio NIC on a tap
// device the host made beforehand (vmctl/network), written as
//
//	<interface type='ethernet'>
//	  <mac address='MAC'/>
//	  <target dev='TAP' managed='no'/>
//	  <model type='virtio'/>
//	</interface>
//
// type='ethernet' with managed='no' makes libvirt open the existing tap
// and hand it to QEMU without touching it: no bridge, no libvirt network,
// no address or firewall of libvirt's own (libvirt domain format,
// "Generic ethernet connection", https://libvirt.org/formatdomain.html).
type Interface struct {
	// Tap is the host tap device's name: 1-15 letters, digits, '_', '.' or '-'.
	Tap string
	// MAC is the guest NIC's MAC address, "xx:xx:xx:xx:xx:xx" (unicast).
	MAC string
}

var tapRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,15}$`)

// validate checks a set interface; nil means none.
func (i *Interface) validate() []error {
	if i == nil {
		return nil
	}
	var errs []error
	if !tapRE.MatchString(i.Tap) {
		errs = append(errs, &fieldError{field: "Interface.Tap", msg: fmt.Sprintf("%q is not an interface name; use 1-15 letters, digits, '_', '.' or '-'", i.Tap)})
	}
	if hw, err := net.ParseMAC(i.MAC); err != nil || len(hw) != 6 || hw[0]&1 != 0 {
		errs = append(errs, &fieldError{field: "Interface.MAC", msg: fmt.Sprintf("%q is not a unicast MAC address; use the form 02:ab:00:00:00:01", i.MAC)})
	}
	return errs
}

// apply adds the <interface> element to d.
func (i *Interface) apply(d *libvirtxml.Domain) {
	if i == nil {
		return
	}
	d.Devices.Interfaces = append(d.Devices.Interfaces, libvirtxml.DomainInterface{
		MAC:    &libvirtxml.DomainInterfaceMAC{Address: i.MAC},
		Source: &libvirtxml.DomainInterfaceSource{Ethernet: &libvirtxml.DomainInterfaceSourceEthernet{}},
		Target: &libvirtxml.DomainInterfaceTarget{Dev: i.Tap, Managed: "no"},
		Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
	})
}
