package libvirt

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/domain"
)

// skipOrFail skips the test for a missing host capability, or fails it in
// strict mode (testenv.Strict: `make test` and CI).
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	testenv.SkipOrFail(t, format, args...)
}

// testPrefix makes domain names unique per test process, so concurrent
// runs on one host never touch each other's domains.
var testPrefix = fmt.Sprintf("agentbox-test-%d-", os.Getpid())

var nameSeq atomic.Int64

func uniqueName() string {
	return fmt.Sprintf("%s%d", testPrefix, nameSeq.Add(1))
}

// biosDomainXML is a TCG domain with no disk and no kernel: it sits in
// SeaBIOS forever, which is all lifecycle tests need.
func biosDomainXML(name, sandboxID string) string {
	md := domain.MarshalMetadata(domain.Metadata{SandboxID: sandboxID, Image: "none"})
	return `<domain type='qemu'>
  <name>` + name + `</name>
  <metadata>` + md + `</metadata>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <controller type='usb' model='none'/>
    <memballoon model='none'/>
  </devices>
</domain>`
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// connectSystem connects to the host's libvirtd or skips.
func connectSystem(t *testing.T) *Conn {
	t.Helper()
	if _, err := os.Stat(SystemSocket); err != nil {
		skipOrFail(t, "libvirtd socket %s not available: %v", SystemSocket, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{Logger: testLogger(t)})
	if err != nil {
		skipOrFail(t, "cannot connect to libvirtd: %v", err)
	}
	t.Cleanup(func() {
		assertNoTestDomains(t, c)
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// createDomain creates a BIOS-only domain and destroys it at cleanup.
func createDomain(t *testing.T, c *Conn, name string, opts CreateOptions) DomainInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info, err := c.CreateDomain(ctx, biosDomainXML(name, "sb-"+name), opts)
	if err != nil {
		t.Fatalf("CreateDomain %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := c.DestroyDomain(ctx, name); err != nil {
			t.Errorf("cleanup: DestroyDomain %s: %v", name, err)
		}
	})
	return info
}

// assertNoTestDomains fails if a domain of this test process is left.
func assertNoTestDomains(t *testing.T, c *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	doms, err := c.ListDomains(ctx)
	if err != nil {
		t.Errorf("ListDomains at cleanup: %v", err)
		return
	}
	for _, d := range doms {
		if strings.HasPrefix(d.Name, testPrefix) {
			t.Errorf("domain %s (%s) left behind", d.Name, d.State)
		}
	}
}

// nextEvent waits for the next event on ch.
func nextEvent(t *testing.T, ch <-chan LifecycleEvent, within time.Duration) LifecycleEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("lifecycle channel closed")
		}
		return ev
	case <-time.After(within):
		t.Fatalf("no lifecycle event within %s", within)
	}
	panic("unreachable")
}

// waitEvent skips events until one of the given kind arrives.
func waitEvent(t *testing.T, ch <-chan LifecycleEvent, kind EventKind, within time.Duration) LifecycleEvent {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ev := nextEvent(t, ch, time.Until(deadline))
		if ev.Kind == kind {
			return ev
		}
		t.Logf("skipping event %+v while waiting for %s", ev, kind)
	}
}

// privateDaemon is a libvirtd this test starts and may kill: it runs in
// its own mount namespace with private /etc/libvirt, /run/libvirt,
// /var/lib/libvirt, /var/cache/libvirt and /var/log/libvirt (bind-mounted
// from a temp dir, so they survive a restart) and listens on a socket in
// the temp dir. The host's libvirtd and its domains are never touched.
type privateDaemon struct {
	t      *testing.T
	dir    string
	socket string
	cmd    *exec.Cmd
}

func startPrivateDaemon(t *testing.T) *privateDaemon {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "a private libvirtd needs root (mount namespace, QEMU as root)")
	}
	for _, bin := range []string{"unshare", "libvirtd", "qemu-system-x86_64"} {
		if _, err := exec.LookPath(bin); err != nil {
			skipOrFail(t, "%s not found: %v", bin, err)
		}
	}
	dir := t.TempDir()
	for _, d := range []string{"etc", "sock", "run", "lib", "cache", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/libvirtd.conf", fmt.Sprintf("unix_sock_dir = %q\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n", filepath.Join(dir, "sock")))
	// stdio_handler=file: no virtlogd in the private namespace.
	write("etc/qemu.conf", "user = \"root\"\ngroup = \"root\"\nstdio_handler = \"file\"\n")
	write("run.sh", `set -e
D="$1"
mount --make-rprivate /
mount -t tmpfs tmpfs /etc/libvirt
cp "$D/etc/libvirtd.conf" "$D/etc/qemu.conf" /etc/libvirt/
mount --bind "$D/run" /run/libvirt
mount --bind "$D/lib" /var/lib/libvirt
mount --bind "$D/cache" /var/cache/libvirt
mount --bind "$D/log" /var/log/libvirt
mkdir -p /var/log/libvirt/qemu /var/lib/libvirt/qemu /var/cache/libvirt/qemu
exec libvirtd --config /etc/libvirt/libvirtd.conf --pid-file "$D/libvirtd.pid"
`)
	p := &privateDaemon{t: t, dir: dir, socket: filepath.Join(dir, "sock", "libvirt-sock")}
	p.start()
	t.Cleanup(p.shutdown)
	return p
}

// start runs the daemon and waits until its socket accepts an RPC.
func (p *privateDaemon) start() {
	p.t.Helper()
	_ = os.Remove(p.socket)
	logf, err := os.OpenFile(filepath.Join(p.dir, "libvirtd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("unshare", "--mount", "sh", filepath.Join(p.dir, "run.sh"), p.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		skipOrFail(p.t, "start private libvirtd: %v", err)
	}
	p.cmd = cmd
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		c, err := Connect(ctx, Config{Socket: p.socket})
		if err == nil {
			_ = c.Close()
			return
		}
		if ctx.Err() != nil {
			b, _ := os.ReadFile(filepath.Join(p.dir, "libvirtd.log"))
			skipOrFail(p.t, "private libvirtd did not come up: %v\n%s", err, b)
		}
		// The daemon is starting; nothing to wait on but its socket.
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends the daemon abruptly (SIGKILL, as a crash would) and reaps it.
// QEMU processes it started keep running.
func (p *privateDaemon) kill() {
	p.t.Helper()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// shutdown destroys every domain left in the private daemon and stops it.
func (p *privateDaemon) shutdown() {
	if p.cmd == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c, err := Connect(ctx, Config{Socket: p.socket}); err == nil {
		doms, err := c.ListDomains(ctx)
		if err != nil {
			p.t.Errorf("private libvirtd: list domains: %v", err)
		}
		for _, d := range doms {
			if err := c.DestroyDomain(ctx, d.Name); err != nil {
				p.t.Errorf("private libvirtd: destroy %s: %v", d.Name, err)
			}
		}
		_ = c.Close()
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}

// qemuPID reads the pid of a domain's QEMU from the private state dir.
func (p *privateDaemon) qemuPID(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dir, "run", "qemu", name+".pid"))
	if err != nil {
		t.Fatalf("qemu pid of %s: %v", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("qemu pid of %s: %v", name, err)
	}
	return pid
}

// killQEMU kills a QEMU process the private daemon started for this test
// and waits until it is gone.
func (p *privateDaemon) killQEMU(t *testing.T, pid int) {
	t.Helper()
	proc, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill qemu %d: %v", pid, err)
	}
	// QEMU is not our child; poll /proc until it has exited.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("qemu %d did not exit", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
