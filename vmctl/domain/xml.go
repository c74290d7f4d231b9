package domain

import (
	"fmt"

	"libvirt.org/go/libvirtxml"
)

// XML validates s and returns the libvirt domain XML for it, suitable for
// virDomainCreateXML (a transient domain). The document is indented and
// deterministic: the same Spec always yields the same text.
//
// Choices, with their sources in the libvirt domain format documentation
// (https://libvirt.org/formatdomain.html):
//   - on_poweroff, on_reboot and on_crash are all "destroy": the guest runs
//     with panic=-1, so a panic becomes a reboot and the domain ends at once
//     instead of looping.
//   - <features><acpi/></features>: without ACPI the guest cannot power the
//     machine off cleanly.
//   - no network interface, no graphics or video, USB controller model
//     "none" and memballoon model "none": fewer devices, faster TCG boot, no
//     traffic.
//   - the vCPU is host-passthrough for kvm; for qemu (TCG) no <cpu> element
//     is written, so libvirt/QEMU use the default model (qemu64).
func XML(s Spec) (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	d := build(s)
	out, err := d.Marshal()
	if err != nil {
		return "", fmt.Errorf("marshal domain %s: %w", s.Name, err)
	}
	return out + "\n", nil
}

// build maps a valid Spec onto libvirtxml types.
func build(s Spec) *libvirtxml.Domain {
	machine := s.Machine
	if machine == "" {
		machine = DefaultMachine
	}
	port0 := uint(0)

	d := &libvirtxml.Domain{
		Type: string(s.Type),
		Name: s.Name,
		UUID: s.UUID,
		Metadata: &libvirtxml.DomainMetadata{
			XML: MarshalMetadata(Metadata{SandboxID: s.SandboxID, Image: s.Image, Owner: s.Owner}),
		},
		Memory:        &libvirtxml.DomainMemory{Value: uint(s.MemoryMiB), Unit: "MiB"},
		CurrentMemory: &libvirtxml.DomainCurrentMemory{Value: uint(s.MemoryMiB), Unit: "MiB"},
		VCPU:          &libvirtxml.DomainVCPU{Placement: "static", Value: s.VCPUs},
		OS: &libvirtxml.DomainOS{
			Type:    &libvirtxml.DomainOSType{Arch: Arch, Machine: machine, Type: "hvm"},
			Kernel:  s.Kernel,
			Initrd:  s.Initrd,
			Cmdline: s.Cmdline,
		},
		Features:   &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}},
		Clock:      &libvirtxml.DomainClock{Offset: "utc"},
		OnPoweroff: "destroy",
		OnReboot:   "destroy",
		OnCrash:    "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Disks: []libvirtxml.DomainDisk{{
				Device: "disk",
				Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2", Discard: "unmap"},
				Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: s.Disk}},
				Target: &libvirtxml.DomainDiskTarget{Dev: DiskTarget, Bus: "virtio"},
			}},
			Controllers: []libvirtxml.DomainController{{Type: "usb", Model: "none"}},
			Serials: []libvirtxml.DomainSerial{{
				Source: &libvirtxml.DomainChardevSource{
					File: &libvirtxml.DomainChardevSourceFile{Path: s.ConsoleLog, Append: "off"},
				},
				Target: &libvirtxml.DomainSerialTarget{Type: "isa-serial", Port: &port0},
			}},
			Consoles: []libvirtxml.DomainConsole{{
				Source: &libvirtxml.DomainChardevSource{
					File: &libvirtxml.DomainChardevSourceFile{Path: s.ConsoleLog, Append: "off"},
				},
				Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: &port0},
			}},
			Channels:   []libvirtxml.DomainChannel{unixChannel(s.AgentSocket, s.AgentPort)},
			MemBalloon: &libvirtxml.DomainMemBalloon{Model: "none"},
			// A virtio-rng fed from the host's /dev/urandom: without it a
			// TCG guest's CRNG is not ready when the agent starts, and the
			// first getrandom() (Python, Go crypto/rand) stalls ~1 s.
			RNGs: []libvirtxml.DomainRNG{{
				Model:   "virtio",
				Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
			}},
		},
	}
	if s.GuestAgentSocket != "" {
		d.Devices.Channels = append(d.Devices.Channels, unixChannel(s.GuestAgentSocket, GuestAgentPort))
	}
	if s.GenID {
		d.GenID = &libvirtxml.DomainGenID{} // empty: libvirt generates a new GUID for each start
	}
	s.Tune.apply(d)
	s.Interface.apply(d)
	s.MemoryBackend.apply(d, s.MemoryMiB)
	s.QEMUUser.apply(d)
	if s.DiskBacking != "" {
		d.Devices.Disks[0].BackingStore = &libvirtxml.DomainDiskBackingStore{
			Format:       &libvirtxml.DomainDiskFormat{Type: "qcow2"},
			Source:       &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: s.DiskBacking}},
			BackingStore: &libvirtxml.DomainDiskBackingStore{}, // the base has no backing file
		}
	}
	if s.Type == TypeKVM {
		d.CPU = &libvirtxml.DomainCPU{Mode: "host-passthrough", Check: "none", Migratable: "on"}
	}
	return d
}

// unixChannel is a virtio-serial channel backed by a unix socket that
// QEMU listens on (mode='bind'); the host side connects to path.
func unixChannel(path, port string) libvirtxml.DomainChannel {
	return libvirtxml.DomainChannel{
		Source: &libvirtxml.DomainChardevSource{
			UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: path},
		},
		Target: &libvirtxml.DomainChannelTarget{
			VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: port},
		},
	}
}
