package domain

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"libvirt.org/go/libvirtxml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// validSpec returns a TCG spec that passes Validate; tests mutate copies.
func validSpec() Spec {
	return Spec{
		Name:        "agentbox-sb1",
		SandboxID:   "sb1",
		Image:       "agentbox-test",
		Type:        TypeQEMU,
		VCPUs:       1,
		MemoryMiB:   512,
		Kernel:      "/var/lib/agentbox/images/test/vmlinuz",
		Initrd:      "/var/lib/agentbox/images/test/initrd.img",
		Cmdline:     "console=ttyS0 root=/dev/vda rw panic=-1 quiet",
		Disk:        "/var/lib/agentbox/sandboxes/sb1/disk.qcow2",
		AgentSocket: "/run/agentbox/sb1/agent.sock",
		AgentPort:   "org.agentbox.agent.0",
		ConsoleLog:  "/var/lib/agentbox/sandboxes/sb1/console.log",
	}
}

func TestXMLGolden(t *testing.T) {
	kvm := validSpec()
	kvm.Name = "agentbox-sb2"
	kvm.SandboxID = "sb2"
	kvm.UUID = "6f1b0e0e-4a55-4b8e-9d0a-0a2b3c4d5e6f"
	kvm.Type = TypeKVM
	kvm.VCPUs = 4
	kvm.MemoryMiB = 2048
	kvm.Machine = "pc-i440fx-7.2"
	kvm.GuestAgentSocket = "/run/agentbox/sb2/qga.sock"
	kvm.Owner = "0123456789abcdef"

	minimal := validSpec()
	minimal.Image = ""
	minimal.Initrd = ""
	minimal.Cmdline = ""

	escaped := validSpec()
	escaped.SandboxID = "a<b>&c"
	escaped.Cmdline = `console=ttyS0 x="<&>"`

	tuned := validSpec()
	tuned.Tune = Tune{CPUQuotaPercent: 50, MemoryHardLimitMiB: 896, BlkioWeight: 500,
		DiskBytesPerSec: 10 << 20, DiskIOPS: 500, TCGCacheMiB: 128}

	backing := validSpec()
	backing.DiskBacking = "/var/lib/agentbox/images/x/rootfs.qcow2"

	for _, tc := range []struct {
		golden string
		spec   Spec
	}{
		{"qemu.xml", validSpec()},
		{"kvm-guest-agent.xml", kvm},
		{"minimal.xml", minimal},
		{"escaped.xml", escaped},
		{"tuned.xml", tuned},
		{"backing.xml", backing},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			got, err := XML(tc.spec)
			if err != nil {
				t.Fatalf("XML: %v", err)
			}
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run go test -update to create it): %v", err)
			}
			if got != string(want) {
				t.Errorf("XML differs from %s (run go test -update if intended)\n--- got\n%s\n--- want\n%s", path, got, want)
			}

			// The output must read back as the same domain.
			var d libvirtxml.Domain
			if err := d.Unmarshal(got); err != nil {
				t.Fatalf("unmarshal generated XML: %v", err)
			}
			if d.Name != tc.spec.Name || d.Type != string(tc.spec.Type) {
				t.Errorf("round trip: name %q type %q", d.Name, d.Type)
			}
			md, err := ParseMetadata(d.Metadata.XML)
			if err != nil {
				t.Fatalf("ParseMetadata: %v", err)
			}
			if md.SandboxID != tc.spec.SandboxID || md.Image != tc.spec.Image {
				t.Errorf("metadata round trip: got %+v", md)
			}
		})
	}
}

func TestXMLDeterministic(t *testing.T) {
	a, err := XML(validSpec())
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		b, err := XML(validSpec())
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Fatal("XML output differs between calls")
		}
	}
}

func TestXMLRejectsInvalid(t *testing.T) {
	s := validSpec()
	s.Kernel = ""
	if _, err := XML(s); err == nil {
		t.Fatal("XML accepted a spec without a kernel")
	}
}
