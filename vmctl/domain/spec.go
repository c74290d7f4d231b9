// Package domain turns a typed description of a sandbox VM ([Spec]) into
// libvirt domain XML. It is pure: no I/O, no libvirt connection. The XML is
// built with libvirt.org/go/libvirtxml, so every user-supplied string is
// escaped by the encoder; [Spec.Validate] additionally rejects values that
// would be legal XML but wrong for agentbox (relative paths, odd names).
//
// The shape of the generated domain follows the libvirt domain format
// (https://libvirt.org/formatdomain.html): a transient domain with direct
// kernel boot, one qcow2 disk on virtio, a file-backed serial console, a
// virtio-serial channel for the agentbox guest agent and the smallest
// device set that boots quickly under TCG.
package domain

// Type is the libvirt domain type, the value of <domain type='...'>.
type Type string

const (
	// TypeKVM runs the guest with hardware virtualisation (/dev/kvm). The
	// vCPU is host-passthrough.
	TypeKVM Type = "kvm"
	// TypeQEMU runs the guest under QEMU's TCG emulator. It works
	// everywhere, is slower, and uses libvirt's default CPU model
	// (qemu64 on x86_64, an x86-64-v1 CPU a modern Debian kernel boots on).
	TypeQEMU Type = "qemu"
)

// DefaultMachine is the machine type used when [Spec.Machine] is empty:
// QEMU's i440fx PC. It boots faster under TCG than q35 (fewer devices to
// emulate, no PCIe root ports).
const DefaultMachine = "pc"

// Arch is the guest architecture written into <os><type arch='...'>.
const Arch = "x86_64"

// DiskTarget is the guest device name of the root disk (/dev/vda in the
// guest, on the virtio bus).
const DiskTarget = "vda"

// GuestAgentPort is the virtio-serial port name QEMU's guest agent
// (qemu-ga) listens on, and the name libvirt looks for when it proxies
// virDomainQemuAgentCommand.
const GuestAgentPort = "org.qemu.guest_agent.0"

// Limits enforced by [Spec.Validate].
const (
	// MaxVCPUs is the largest accepted [Spec.VCPUs].
	MaxVCPUs = 64
	// MinMemoryMiB is the smallest accepted [Spec.MemoryMiB]; a Debian
	// kernel with an initramfs does not boot in less.
	MinMemoryMiB = 64
	// MaxMemoryMiB is the largest accepted [Spec.MemoryMiB] (1 TiB).
	MaxMemoryMiB = 1 << 20
	// MaxUnixSocketPath is the longest unix socket path, in bytes, that
	// fits in sockaddr_un.sun_path (108 bytes including the NUL) on Linux.
	MaxUnixSocketPath = 107
)

// Spec describes one sandbox VM. All paths are absolute paths on the host
// as seen by the QEMU process libvirtd starts. Zero values are invalid
// unless the field says it is optional; call [Spec.Validate] (or [XML],
// which calls it) to get a message naming the field to fix.
type Spec struct {
	// Name is the libvirt domain name. Required; it must match
	// ^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$ so that it is safe in file names
	// libvirt derives from it (/run/libvirt/qemu/NAME.pid, logs).
	Name string
	// UUID is the domain UUID in its textual 8-4-4-4-12 hex form.
	// Optional: libvirt generates one when empty.
	UUID string

	// SandboxID identifies the agentbox sandbox that owns this domain. It
	// is stored in the domain <metadata> under [MetadataNamespace] so that
	// a daemon restarted later can find its domains. Required; printable
	// characters only, at most 128 bytes.
	SandboxID string
	// Image is the name of the image the sandbox was created from,
	// recorded in the metadata next to SandboxID. Optional; same charset
	// as SandboxID.
	Image string
	// Owner is the managing daemon's instance id, recorded in the
	// metadata (see Metadata.Owner); empty for in-process sandboxes.
	// Same charset as SandboxID.
	Owner string

	// Type is the domain type: [TypeKVM] or [TypeQEMU]. Required.
	Type Type
	// Machine is the QEMU machine type. Optional, default [DefaultMachine].
	Machine string
	// VCPUs is the number of virtual CPUs, 1..[MaxVCPUs].
	VCPUs uint
	// MemoryMiB is the guest RAM in MiB, [MinMemoryMiB]..[MaxMemoryMiB].
	MemoryMiB uint64

	// Kernel is the absolute path of the guest kernel image (bzImage),
	// booted directly by QEMU without a bootloader. Required.
	Kernel string
	// Initrd is the absolute path of the initramfs. Optional.
	Initrd string
	// Cmdline is the kernel command line. It should contain
	// console=ttyS0 (the serial port logged to ConsoleLog) and panic=-1
	// (a panic reboots, and on_reboot=destroy then ends the domain).
	// Optional; no control characters.
	Cmdline string

	// Disk is the absolute path of the sandbox's qcow2 overlay, attached
	// as virtio disk vda with discard=unmap. Required.
	Disk string
	// DiskBacking is the absolute path of the overlay's backing file (the
	// image's base qcow2), written as the disk's <backingStore> with an
	// empty one below it (the chain ends there): libvirt then does not
	// read the chain from the overlay's header, which the sandbox's QEMU
	// writes (a guest that took QEMU over could name any file or a json:
	// pseudo-protocol there; issue 24), and QEMU is given the backing node
	// instead of opening the name in the header. Optional: "" (specs
	// recorded before it existed) leaves the chain to libvirt's probe.
	DiskBacking string

	// AgentSocket is the absolute path of the unix socket libvirt/QEMU
	// creates (mode='bind') for the agentbox guest agent channel; the host
	// connects to it. At most [MaxUnixSocketPath] bytes. Required.
	AgentSocket string
	// AgentPort is the virtio-serial port name of the agent channel, e.g.
	// "org.agentbox.agent.0"; the guest finds it under
	// /dev/virtio-ports/NAME. Required.
	AgentPort string

	// GuestAgentSocket is the absolute path of a unix socket for a second
	// channel named [GuestAgentPort], for QEMU's own guest agent (qemu-ga).
	// Optional; only a benchmark uses it.
	GuestAgentSocket string

	// ConsoleLog is the absolute path of the file the serial console
	// (ttyS0) is written to. QEMU truncates it when the domain starts
	// (append='off'). Required.
	ConsoleLog string

	// Tune holds the host-side resource limits (CPU quota, memory hard
	// limit, block I/O weight and throttling, TCG cache size). Optional:
	// the zero value adds no tuning elements.
	Tune Tune

	// Interface is the sandbox's network device (a virtio NIC on a host
	// tap). Optional: nil means no network device at all.
	Interface *Interface

	// GenID adds a VM generation ID device, written as <genid/>: libvirt
	// gives every domain it starts a new random GUID, QEMU's vmgenid
	// device shows it to the guest through ACPI, and when a loaded
	// snapshot's saved GUID differs from the new domain's, QEMU notifies
	// the guest, whose vmgenid driver (Linux >= 5.18) reseeds its random
	// number generator at once. So every restore of one snapshot draws
	// fresh random numbers. It is part of the machine's device set: a
	// snapshot restores only into a domain with the same GenID setting.
	GenID bool

	// MemoryBackend, if set, puts the guest RAM in agentbox's own QEMU
	// memory backend (a RAM file for warm memory templates), passed
	// through libvirt's <qemu:commandline>: see [MemoryBackend]. Optional.
	MemoryBackend *MemoryBackend

	// QEMUUser, if set, runs the domain's QEMU as that uid and gid
	// (libvirt's per-domain DAC label, see [QEMUUser]); nil runs it as
	// qemu.conf's user. Optional.
	QEMUUser *QEMUUser
}
