package domain

import (
	"fmt"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// RAMBackendID is the QEMU object id of the guest RAM backend a
// [MemoryBackend] adds. It is also the name of the RAM block in QEMU's
// migration stream (and in internal snapshots), so every domain that
// loads a state saved with a MemoryBackend needs one too.
const RAMBackendID = "agentbox-ram"

// MemoryBackend puts the guest RAM into a QEMU memory backend of
// agentbox's own, for warm memory templates (vmctl/sandbox/warm): a
// template runs with its RAM in a file it shares (share=on), a clone maps
// the same file privately, copy-on-write (share=off), and waits for its
// device state (-incoming defer).
//
// libvirt's <memoryBacking> file source picks its own per-domain path, so
// the backend is passed to QEMU through libvirt's <qemu:commandline>
// (https://libvirt.org/drvqemu.html#pass-through-of-arbitrary-qemu-commands):
// "-object memory-backend-file|ram,id=agentbox-ram,size=…",
// "-machine memory-backend=agentbox-ram" and, for a clone,
// "-incoming defer". libvirt marks such a domain tainted ("custom-argv").
type MemoryBackend struct {
	// File is the absolute path of the RAM file (memory-backend-file);
	// empty means private anonymous RAM (memory-backend-ram) with the same
	// RAM block name: what a domain restarted or restored from a clone's
	// saved state runs with. No commas.
	File string
	// Shared maps File shared (share=on: the guest writes go to the file,
	// a template) rather than private copy-on-write (share=off, a clone).
	// QEMU 7.2 hangs a guest whose RAM file is mapped readonly=on, hence
	// share=off for clones.
	Shared bool
	// Incoming starts QEMU with "-incoming defer": it waits for a
	// migrate-incoming with the device state instead of booting.
	Incoming bool
}

// Private returns the backend a domain that reuses this one's spec
// without the template gets (a restart of a stopped clone, a restore of
// a clone's snapshot, a resume from disk): anonymous private RAM with the
// same RAM block name, no incoming migration. nil stays nil.
func (mb *MemoryBackend) Private() *MemoryBackend {
	if mb == nil {
		return nil
	}
	return &MemoryBackend{}
}

// Args returns the QEMU arguments of the backend for a guest of
// memoryMiB MiB.
func (mb *MemoryBackend) Args(memoryMiB uint64) []string {
	obj := fmt.Sprintf("memory-backend-ram,id=%s,size=%dM", RAMBackendID, memoryMiB)
	if mb.File != "" {
		share := "off"
		if mb.Shared {
			share = "on"
		}
		obj = fmt.Sprintf("memory-backend-file,id=%s,size=%dM,mem-path=%s,share=%s", RAMBackendID, memoryMiB, mb.File, share)
	}
	args := []string{"-object", obj, "-machine", "memory-backend=" + RAMBackendID}
	if mb.Incoming {
		args = append(args, "-incoming", "defer")
	}
	return args
}

func (mb *MemoryBackend) validate() []error {
	if mb == nil {
		return nil
	}
	var errs []error
	if mb.File != "" {
		if msg := checkAbsPath(mb.File); msg != "" {
			errs = append(errs, &fieldError{field: "MemoryBackend.File", msg: fmt.Sprintf("%q %s", mb.File, msg)})
		} else if strings.Contains(mb.File, ",") {
			errs = append(errs, &fieldError{field: "MemoryBackend.File", msg: fmt.Sprintf("%q contains a comma, which QEMU's option syntax would split on; use a path without commas", mb.File)})
		}
	}
	if mb.File == "" && (mb.Shared || mb.Incoming) {
		errs = append(errs, &fieldError{field: "MemoryBackend", msg: "Shared and Incoming need a RAM File"})
	}
	return errs
}

func (mb *MemoryBackend) apply(d *libvirtxml.Domain, memoryMiB uint64) {
	if mb == nil {
		return
	}
	cl := &libvirtxml.DomainQEMUCommandline{}
	for _, a := range mb.Args(memoryMiB) {
		cl.Args = append(cl.Args, libvirtxml.DomainQEMUCommandlineArg{Value: a})
	}
	d.QEMUCommandline = cl
}

// Taints returns the libvirt taints the domain of s gets from its own
// configuration: "custom-argv" with a MemoryBackend (passthrough of QEMU
// arguments); nil otherwise.
func (s Spec) Taints() []string {
	if s.MemoryBackend != nil {
		return []string{"custom-argv"}
	}
	return nil
}
