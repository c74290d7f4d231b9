package sandbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
)

// fixture is a sandbox manager on the real libvirtd with private state and
// runtime dirs, checked for leaks when the test ends.
type fixture struct {
	mgr   *sandbox.Manager
	img   *image.Image
	state string
}

func newFixture(t testing.TB, imgDir string) *fixture {
	t.Helper()
	ctx := context.Background()
	conn, err := libvirt.Connect(ctx, libvirt.Config{URI: testenv.URI()})
	if err != nil {
		t.Fatalf("libvirt: %v (is libvirtd running? `make test` starts it)", err)
	}
	state := t.TempDir()
	runtime := testenv.ShortTempDir(t)
	drv := libvirt.NewDriver(conn)
	mgr, err := sandbox.NewManager(sandbox.Config{Driver: drv, Limits: resources.New(drv, nil), StateDir: state, RuntimeDir: runtime})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		testenv.AssertNoLeaks(t, state, runtime)
	})
	img, err := image.Load(ctx, imgDir, image.LoadOptions{VerifyCacheDir: filepath.Join(os.TempDir(), "agentbox-test-verify")})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{mgr: mgr, img: img, state: state}
}

var tcg = accel.Choice{DomainType: "qemu", Accel: accel.ModeTCG, Reason: "test"}

// create boots a sandbox that is destroyed when the test ends.
func (f *fixture) create(t *testing.T, opts sandbox.Options) *sandbox.Sandbox {
	t.Helper()
	opts.Image, opts.Accel = f.img, tcg
	sb, err := f.mgr.Create(context.Background(), opts)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := f.mgr.Destroy(context.Background(), sb); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return sb
}

// sh runs a shell command and returns stdout, stderr and the status.
func sh(t *testing.T, sb *sandbox.Sandbox, script string, timeout time.Duration) (string, string, agentproto.ExitStatus) {
	t.Helper()
	var out, errb bytes.Buffer
	st, err := sb.Exec(context.Background(), agentproto.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutMs: timeout.Milliseconds()}, nil, &out, &errb)
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return out.String(), errb.String(), st
}

// TestGuest boots one guest and checks what needs several commands in it.
func TestGuest(t *testing.T) {
	f := newFixture(t, testenv.Image(t))
	sb := f.create(t, sandbox.Options{})

	t.Run("TwoExecsAtOnce", func(t *testing.T) {
		var wg sync.WaitGroup
		outs := make([]string, 2)
		order := make(chan int, 2)
		for i, script := range []string{"sleep 5; echo slow", "echo fast"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var out bytes.Buffer
				st, err := sb.Exec(context.Background(), agentproto.ExecRequest{Argv: []string{"sh", "-c", script}}, nil, &out, &out)
				if err != nil || st.Code != 0 {
					t.Errorf("exec %q: %v %+v", script, err, st)
				}
				outs[i] = out.String()
				order <- i
			}()
		}
		wg.Wait()
		if outs[0] != "slow\n" || outs[1] != "fast\n" {
			t.Fatalf("outputs %q", outs)
		}
		if first := <-order; first != 1 {
			t.Fatal("the fast command waited for the slow one")
		}
	})

	t.Run("FileRoundTrip", func(t *testing.T) {
		data := make([]byte, 1<<20)
		rand.Read(data)
		ctx := context.Background()
		if err := sb.Agent().WriteFile(ctx, "/root/blob.bin", bytes.NewReader(data), 0o640); err != nil {
			t.Fatal(err)
		}
		var back bytes.Buffer
		if err := sb.Agent().ReadFile(ctx, "/root/blob.bin", &back); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back.Bytes(), data) {
			t.Fatalf("read back %d bytes, differing from the %d written", back.Len(), len(data))
		}
		out, _, st := sh(t, sb, "stat -c '%s %a' /root/blob.bin", 0)
		if st.Code != 0 || out != "1048576 640\n" {
			t.Fatalf("guest sees %q", out)
		}
	})

	t.Run("TimeoutKillsProcessGroup", func(t *testing.T) {
		start := time.Now()
		out, _, st := sh(t, sb, "python3 -m http.server 8123 >/dev/null 2>&1 & echo $! >/tmp/server.pid; echo up; sleep 300", 2*time.Second)
		el := time.Since(start)
		if !st.TimedOut || out != "up\n" {
			t.Fatalf("status %+v, stdout %q: want a timeout", st, out)
		}
		// A bound against a timeout that waited for sleep 300, not a
		// timing assertion: a loaded TCG host can take seconds to kill
		// and reap.
		if el < 2*time.Second || el > 30*time.Second {
			t.Errorf("returned after %s, want soon after the 2 s limit (not the 300 s sleep)", el)
		}
		out, _, st = sh(t, sb, "pid=$(cat /tmp/server.pid); if [ -e /proc/$pid ]; then echo alive; else echo gone; fi", 0)
		if out != "gone\n" {
			t.Fatalf("background server after timeout: %q", out)
		}
	})

	t.Run("NoZombies", func(t *testing.T) {
		for i := 0; i < 1000; i++ {
			if _, _, st := sh(t, sb, "sleep 0.01 &", 0); st.Code != 0 {
				t.Fatalf("command %d: %+v", i, st)
			}
		}
		// Let the last background sleeps end, then count zombies.
		count := `sleep 0.5; z=0; for s in /proc/[0-9]*/stat; do read -r l <"$s" 2>/dev/null || continue; case "${l##*) }" in Z*) z=$((z+1));; esac; done; echo $z`
		if out, _, _ := sh(t, sb, count, 0); out != "0\n" {
			t.Fatalf("zombies left: %q", out)
		}
	})

	t.Run("OOMKillsHogNotAgent", func(t *testing.T) {
		_, _, st := sh(t, sb, `exec python3 -c 'x = []
while True: x.append(bytearray(16 << 20))'`, 0)
		if st.Signal != 9 {
			t.Fatalf("memory hog ended with %+v, want SIGKILL from the OOM killer", st)
		}
		if out, _, st := sh(t, sb, "echo alive", 0); out != "alive\n" || st.Code != 0 {
			t.Fatalf("agent after OOM: %q %+v", out, st)
		}
	})
}

// TestGuestDeathEndsCreate: an image whose initramfs cannot find the agent
// powers off during boot; Create must fail at once with the console's last
// lines and leave nothing behind.
func TestGuestDeathEndsCreate(t *testing.T) {
	src := testenv.Image(t)
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "manifest.toml" {
			os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name()))
		}
	}
	m, _ := os.ReadFile(filepath.Join(src, "manifest.toml"))
	m = bytes.Replace(m, []byte(`cmdline = "`), []byte(`cmdline = "agentbox.init=/nonexistent `), 1)
	os.WriteFile(filepath.Join(dir, "manifest.toml"), m, 0o644)

	f := newFixture(t, dir)
	start := time.Now()
	_, err = f.mgr.Create(context.Background(), sandbox.Options{Image: f.img, Accel: tcg, BootTimeout: 5 * time.Minute})
	if !errors.Is(err, sandbox.ErrGuestDied) {
		t.Fatalf("err = %v, want ErrGuestDied", err)
	}
	if !strings.Contains(err.Error(), "/nonexistent") {
		t.Fatalf("error lacks the console's last lines: %v", err)
	}
	t.Logf("failed after %s: %v", time.Since(start), err)
}

// TestBadImageLeavesNothing: a kernel QEMU cannot load fails StartDomain;
// the overlay and sandbox dir must be gone.
func TestBadImageLeavesNothing(t *testing.T) {
	src := testenv.Image(t)
	f := newFixture(t, src)
	img := *f.img
	bogus := filepath.Join(t.TempDir(), "vmlinuz")
	os.WriteFile(bogus, []byte("not a kernel"), 0o644)
	img.Kernel = bogus
	_, err := f.mgr.Create(context.Background(), sandbox.Options{Image: &img, Accel: tcg})
	if err == nil {
		t.Fatal("booting a bogus kernel succeeded")
	}
	t.Logf("error: %v", err)
	left, _ := filepath.Glob(filepath.Join(f.state, "sandboxes", "*"))
	if len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}
