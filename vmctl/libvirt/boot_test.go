package libvirt

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/overlay"
)

// TestBootImage boots a real image under TCG from the XML of
// domain.XML, over an overlay from package overlay, and waits until the
// kernel runs the initramfs: proof that the default TCG CPU model, the
// i440fx machine and the device set boot a Debian kernel.
func TestBootImage(t *testing.T) {
	dir := testenv.Image(t)
	c := connectSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	work := t.TempDir()
	disk := filepath.Join(work, "disk.qcow2")
	if err := overlay.Create(ctx, filepath.Join(dir, "rootfs.qcow2"), disk, overlay.Options{}); err != nil {
		t.Fatal(err)
	}
	name := uniqueName()
	spec := domain.Spec{
		Name:        name,
		SandboxID:   "boot-" + name,
		Image:       "agentbox-test",
		Type:        domain.TypeQEMU,
		VCPUs:       1,
		MemoryMiB:   512,
		Kernel:      filepath.Join(dir, "vmlinuz"),
		Initrd:      filepath.Join(dir, "initrd.img"),
		Cmdline:     "console=ttyS0 root=/dev/vda rw panic=-1",
		Disk:        disk,
		AgentSocket: filepath.Join(work, "agent.sock"),
		AgentPort:   "org.agentbox.agent.0",
		ConsoleLog:  filepath.Join(work, "console.log"),
	}
	xml, err := domain.XML(spec)
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.WatchLifecycle(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.CreateDomain(ctx, xml, CreateOptions{})
	if err != nil {
		t.Fatalf("CreateDomain: %v", err)
	}
	t.Cleanup(func() { _ = c.DestroyDomain(context.Background(), name) })
	if info.SandboxID != spec.SandboxID {
		t.Errorf("metadata sandbox id %q", info.SandboxID)
	}

	// The console log is a plain file QEMU writes; there is no event for
	// "the kernel printed X", so poll it, while a stop event fails fast.
	const marker = "Run /init as init process"
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case ev := <-events:
			if ev.Kind == EventStopped {
				b, _ := os.ReadFile(spec.ConsoleLog)
				t.Fatalf("domain stopped (%s) before the initramfs ran; console:\n%s", ev.Detail, b)
			}
		case <-tick.C:
			b, _ := os.ReadFile(spec.ConsoleLog)
			if strings.Contains(string(b), marker) {
				t.Logf("kernel reached the initramfs: %d bytes of console", len(b))
				return
			}
		case <-ctx.Done():
			b, _ := os.ReadFile(spec.ConsoleLog)
			t.Fatalf("no %q on the console; console:\n%s", marker, b)
		}
	}
}
