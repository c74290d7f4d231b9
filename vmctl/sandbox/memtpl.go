package sandbox

import "context"

// MemoryTemplater is the part of a driver that saves and loads a
// domain's device state without its RAM, for warm memory templates
// (vmctl/sandbox/warm): the RAM stays in a file (domain.MemoryBackend)
// that clones map copy-on-write. vmctl/libvirt.Driver implements it.
type MemoryTemplater interface {
	// Emulator describes the hypervisor binary that runs domains of
	// domainType and machine, for the key a memory template must match.
	Emulator(ctx context.Context, domainType, machine string) (Emulator, error)
	// SaveDeviceState stops the domain and migrates its device state,
	// without its shared RAM (x-ignore-shared), into the new file (which
	// must not exist). The domain is left paused, its RAM file complete:
	// destroy it then. On error the file is removed.
	SaveDeviceState(ctx context.Context, name, file string) error
	// LoadDeviceState loads file, saved by SaveDeviceState, into a domain
	// started paused with an incoming MemoryBackend, and leaves it
	// paused. On error the domain may be gone (QEMU exits when an incoming
	// migration fails) and must be destroyed.
	LoadDeviceState(ctx context.Context, name, file string) error
}

// Emulator identifies the hypervisor binary behind a domain: what a
// memory template's device state depends on besides the domain's
// devices.
type Emulator struct {
	// Path is the emulator binary (e.g. /usr/bin/qemu-system-x86_64),
	// Version the hypervisor's version as libvirt reports it
	// (major*1000000 + minor*1000 + micro).
	Path    string `json:"path"`
	Version uint64 `json:"version"`
	// Machine is the canonical machine type the domain's machine alias
	// resolves to (e.g. pc-i440fx-7.2 for pc).
	Machine string `json:"machine"`
	// Binary is the binary's size and modification time ("SIZE@UNIXNANO"),
	// so a rebuilt binary of one version counts as another; empty when
	// the binary cannot be read from here.
	Binary string `json:"binary,omitempty"`
}
