// Package accel chooses the accelerator a sandbox's domain runs with: KVM
// (libvirt domain type "kvm") where a guest really runs under it, else QEMU's
// TCG software emulation (domain type "qemu").
//
// "auto" never picks KVM blindly: /dev/kvm can exist where a standard guest
// kernel cannot run, e.g. under a nested PVM hypervisor (kvm_pvm), which only
// runs PVM-enabled guest kernels. Choose therefore opens /dev/kvm, refuses
// kvm_pvm, and runs a few instructions in a throw-away KVM virtual machine
// (real mode, as firmware starts) before it says yes.
package accel

import (
	"errors"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Mode is what the user asked for: ModeAuto, ModeKVM or ModeTCG.
type Mode string

// The accepted modes of --accel.
const (
	ModeAuto Mode = "auto"
	ModeKVM  Mode = "kvm"
	ModeTCG  Mode = "tcg"
)

// ParseMode turns a --accel value into a Mode; the error says which values
// are accepted.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModeAuto, ModeKVM, ModeTCG:
		return Mode(s), nil
	case "":
		return ModeAuto, nil
	}
	return "", fmt.Errorf("--accel %q: want auto, kvm or tcg", s)
}

// Choice is the accelerator chosen and why.
type Choice struct {
	// DomainType is the libvirt <domain type=...>: "kvm" or "qemu" (TCG).
	DomainType string
	// Accel is "kvm" or "tcg", for messages.
	Accel Mode
	// Reason says why, e.g. "KVM probe ran a guest" or "no /dev/kvm".
	Reason string
}

// ErrKVMUnusable is wrapped when --accel kvm was asked for and KVM cannot
// run a guest here.
var ErrKVMUnusable = errdefs.New(errdefs.ErrFailedPrecondition, "", "KVM cannot run guests on this host")

// Prober tells whether KVM can run a standard guest; nil error means yes.
// ProbeKVM is the real one; tests inject fakes.
type Prober func() error

// Choose resolves mode with probe (nil means ProbeKVM). ModeTCG always
// succeeds. ModeKVM fails with ErrKVMUnusable and the probe's reason.
// ModeAuto picks KVM only when the probe passes, else TCG with the reason.
func Choose(mode Mode, probe Prober) (Choice, error) {
	if probe == nil {
		probe = ProbeKVM
	}
	switch mode {
	case ModeTCG:
		return Choice{DomainType: "qemu", Accel: ModeTCG, Reason: "chosen by --accel tcg (flag, $AGENTBOX_ACCEL or config)"}, nil
	case ModeKVM:
		if err := probe(); err != nil {
			return Choice{}, fmt.Errorf("%w: %v; use --accel tcg (slower software emulation) or fix KVM", ErrKVMUnusable, err)
		}
		return Choice{DomainType: "kvm", Accel: ModeKVM, Reason: "chosen by --accel kvm; KVM probe ran a guest"}, nil
	case ModeAuto, "":
		if err := probe(); err != nil {
			return Choice{DomainType: "qemu", Accel: ModeTCG, Reason: "KVM unusable: " + err.Error()}, nil
		}
		return Choice{DomainType: "kvm", Accel: ModeKVM, Reason: "KVM probe ran a guest"}, nil
	}
	return Choice{}, fmt.Errorf("unknown accel mode %q: want auto, kvm or tcg", mode)
}

// pvmModule exists when the host's KVM is provided by the PVM
// (pagetable-based virtual machine) module, which runs only PVM-enabled guest
// kernels: a standard guest kernel faults under it.
const pvmModule = "/sys/module/kvm_pvm"

// ProbeKVM returns nil when KVM can run a guest: /dev/kvm opens read-write,
// the KVM API version is 12, the KVM is not kvm_pvm, and a tiny real-mode
// guest runs "mov al,0x2a; out 0x10,al; hlt" and exits with that I/O write.
func ProbeKVM() error {
	if _, err := os.Stat(pvmModule); err == nil {
		return errors.New("/dev/kvm is provided by kvm_pvm (a nested PVM hypervisor), which faults standard guest kernels")
	}
	return probeKVMDevice("/dev/kvm")
}
