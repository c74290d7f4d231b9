package domain

import (
	"fmt"

	"libvirt.org/go/libvirtxml"
)

// QEMUUser runs a domain's QEMU process as a user of its own: libvirt's
// per-domain DAC security label (https://libvirt.org/formatdomain.html#security-label),
// written as
//
//	<seclabel type='static' model='dac' relabel='no'><label>+UID:+GID</label></seclabel>
//
// libvirt starts QEMU with exactly that uid and gid (no supplementary
// groups) instead of qemu.conf's user, and QEMU's own seccomp sandbox
// (qemu.conf seccomp_sandbox, on by default) applies as before.
//
// relabel='no' because libvirt 9.0's DAC driver, with relabel='yes',
// chowns every file the domain reads to the label — the image's kernel,
// initrd and the whole backing chain of the disk, which every sandbox of
// the image shares (and never gives the backing files back): a QEMU that
// owns the shared base image could chmod and rewrite it under every other
// sandbox. So libvirt changes no file, and the caller (vmctl/sandbox)
// gives the domain's user what is its own — the overlay and its
// directory, a memory template's RAM file — while shared image files stay
// root's and world-readable (0444). What libvirt makes for the domain
// itself (its private directory under /var/lib/libvirt/qemu, the master
// key) it still labels with the domain's user; the agent socket it
// creates and hands QEMU as a file descriptor, and virtlogd writes the
// console log, so neither needs QEMU's user.
type QEMUUser struct {
	// UID and GID are the numeric user and group the QEMU process runs
	// as. Both must be > 0: 0 would be root, the opposite of the point.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Label returns the DAC label text, "+UID:+GID" (the "+" makes libvirt
// read numbers, not names).
func (u *QEMUUser) Label() string { return fmt.Sprintf("+%d:+%d", u.UID, u.GID) }

func (u *QEMUUser) validate() []error {
	if u == nil || (u.UID > 0 && u.GID > 0) {
		return nil
	}
	return []error{&fieldError{field: "QEMUUser", msg: fmt.Sprintf("uid %d, gid %d: both must be > 0 (leave QEMUUser nil to run QEMU as qemu.conf's user)", u.UID, u.GID)}}
}

func (u *QEMUUser) apply(d *libvirtxml.Domain) {
	if u == nil {
		return
	}
	d.SecLabel = []libvirtxml.DomainSecLabel{{Type: "static", Model: "dac", Relabel: "no", Label: u.Label()}}
}
