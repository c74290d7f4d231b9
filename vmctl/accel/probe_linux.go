package accel

import (
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KVM ioctl numbers and structure offsets, from linux/kvm.h (x86_64).
const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46
	kvmRun                 = 0xAE80
	kvmGetRegs             = 0x8090AE81
	kvmSetRegs             = 0x4090AE82
	kvmGetSregs            = 0x8138AE83
	kvmSetSregs            = 0x4138AE84

	kvmExitIO = 2

	probeGPA  = 0x1000
	probePort = 0x10
	probeByte = 0x2a
)

// probeCode is "mov al,0x2a; out 0x10,al; hlt" in 16-bit real mode.
var probeCode = []byte{0xb0, probeByte, 0xe6, probePort, 0xf4}

type userspaceMemoryRegion struct {
	Slot          uint32
	Flags         uint32
	GuestPhysAddr uint64
	MemorySize    uint64
	UserspaceAddr uint64
}

func ioctl(fd int, req uintptr, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if errno != 0 {
		return r, errno
	}
	return r, nil
}

// probeKVMDevice runs the real-mode probe guest on the KVM device at path.
// KVM_RUN is given 2 s: a hypervisor that hangs the vCPU counts as unusable.
func probeKVMDevice(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no %s (KVM module not loaded, or no hardware virtualization)", path)
		}
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	kvm := int(f.Fd())
	if v, err := ioctl(kvm, kvmGetAPIVersion, 0); err != nil || v != 12 {
		return fmt.Errorf("KVM_GET_API_VERSION = %d (%v), want 12", v, err)
	}
	vmfd, err := ioctl(kvm, kvmCreateVM, 0)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VM: %w", err)
	}
	defer unix.Close(int(vmfd))
	mem, err := unix.Mmap(-1, 0, 0x1000, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("mmap guest memory: %w", err)
	}
	defer unix.Munmap(mem)
	copy(mem, probeCode)
	region := userspaceMemoryRegion{GuestPhysAddr: probeGPA, MemorySize: 0x1000, UserspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if _, err := ioctl(int(vmfd), kvmSetUserMemoryRegion, uintptr(unsafe.Pointer(&region))); err != nil {
		return fmt.Errorf("KVM_SET_USER_MEMORY_REGION: %w", err)
	}
	vcpu, err := ioctl(int(vmfd), kvmCreateVCPU, 0)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VCPU: %w", err)
	}
	defer unix.Close(int(vcpu))
	size, err := ioctl(kvm, kvmGetVCPUMmapSize, 0)
	if err != nil {
		return fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %w", err)
	}
	run, err := unix.Mmap(int(vcpu), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap kvm_run: %w", err)
	}
	defer unix.Munmap(run)

	// struct kvm_sregs: cs is the first struct kvm_segment {u64 base; u32
	// limit; u16 selector; ...}: real mode with cs.base = cs.selector = 0.
	var sregs [312]byte
	if _, err := ioctl(int(vcpu), kvmGetSregs, uintptr(unsafe.Pointer(&sregs[0]))); err != nil {
		return fmt.Errorf("KVM_GET_SREGS: %w", err)
	}
	*(*uint64)(unsafe.Pointer(&sregs[0])) = 0
	*(*uint16)(unsafe.Pointer(&sregs[12])) = 0
	if _, err := ioctl(int(vcpu), kvmSetSregs, uintptr(unsafe.Pointer(&sregs[0]))); err != nil {
		return fmt.Errorf("KVM_SET_SREGS: %w", err)
	}
	// struct kvm_regs: 16 GPRs, then rip (offset 128) and rflags (136).
	var regs [144]byte
	if _, err := ioctl(int(vcpu), kvmGetRegs, uintptr(unsafe.Pointer(&regs[0]))); err != nil {
		return fmt.Errorf("KVM_GET_REGS: %w", err)
	}
	*(*uint64)(unsafe.Pointer(&regs[128])) = probeGPA
	*(*uint64)(unsafe.Pointer(&regs[136])) = 0x2
	if _, err := ioctl(int(vcpu), kvmSetRegs, uintptr(unsafe.Pointer(&regs[0]))); err != nil {
		return fmt.Errorf("KVM_SET_REGS: %w", err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := ioctl(int(vcpu), kvmRun, 0)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("KVM_RUN: %w", err)
		}
	case <-time.After(2 * time.Second):
		return errors.New("KVM_RUN of a probe guest did not return within 2 s")
	}
	// struct kvm_run: exit_reason u32 at 8; io {u8 direction; u8 size; u16
	// port; u32 count; u64 data_offset} at 32.
	reason := *(*uint32)(unsafe.Pointer(&run[8]))
	if reason != kvmExitIO {
		return fmt.Errorf("probe guest exited with KVM exit reason %d, want KVM_EXIT_IO", reason)
	}
	port := *(*uint16)(unsafe.Pointer(&run[34]))
	off := *(*uint64)(unsafe.Pointer(&run[40]))
	if port != probePort || off >= uint64(len(run)) || run[off] != probeByte {
		return fmt.Errorf("probe guest wrote to port %#x, want %#x with %#x", port, probePort, probeByte)
	}
	return nil
}
