package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/image"
)

// benchPty measures the keystroke echo round trip through a terminal
// (--pty): a daemon, one sandbox, `cat` on a terminal through the
// interactive exec WebSocket; each key is written and timed until the
// guest terminal's echo of it arrives (client → daemon → agent → pty →
// line discipline echo → back).
func benchPty(ctx context.Context, img *image.Image, bin, uri string, keys int) {
	tmp, err := os.MkdirTemp("/tmp", "abp")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	sock := filepath.Join(tmp, "api.sock")
	cmd := exec.Command(bin, "--uri", uri, "--socket", sock, "--state-dir", filepath.Join(tmp, "state"), "--runtime-dir", filepath.Join(tmp, "run"), "--log-level", "warn",
		"serve", "--stop-on-exit")
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	cl := client.New(sock)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := cl.Info(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			fail(fmt.Errorf("daemon did not come up: %w", err))
		}
	}
	sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img.Dir, Accel: "tcg"})
	if err != nil {
		fail(fmt.Errorf("create: %w", err))
	}
	defer cl.DeleteSandbox(context.WithoutCancel(ctx), sb.ID, true)

	out := &echoWriter{got: make(chan struct{}, 1)}
	pr, pw := io.Pipe()
	e, err := cl.StartInteractive(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat"}, Tty: &api.TtySize{Rows: 24, Cols: 80}}, pr, out, nil)
	if err != nil {
		fail(fmt.Errorf("interactive exec: %w", err))
	}
	key := func(b byte) time.Duration {
		want := out.len() + 1
		start := time.Now()
		if _, err := pw.Write([]byte{b}); err != nil {
			fail(err)
		}
		for out.len() < want {
			select {
			case <-out.got:
			case <-time.After(30 * time.Second):
				fail(fmt.Errorf("no echo of key %q after 30 s", b))
			}
		}
		return time.Since(start)
	}
	for range 20 { // warm-up
		key('w')
	}
	rtts := make([]time.Duration, 0, keys)
	for i := range keys {
		rtts = append(rtts, key('a'+byte(i%26)))
	}
	pw.Write([]byte{4, 4}) // ^D ends cat (twice: after a partial line)
	if _, err := e.Wait(); err != nil {
		fail(fmt.Errorf("interactive exec: %w", err))
	}
	fmt.Printf("## 11. Keystroke echo round trip through the PTY (`exec -it`: client → daemon WebSocket → agent → guest pty echo)\n\n| keys | p50 | p99 | min | max |\n|---|---|---|---|---|\n")
	fmt.Printf("| %d | %s | %s | %s | %s |\n\n", keys, ms(pct(rtts, 50)), ms(pct(rtts, 99)), ms(minD(rtts)), ms(maxD(rtts)))
}

// echoWriter counts the bytes written to it and signals each write.
type echoWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	got chan struct{}
}

func (w *echoWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	select {
	case w.got <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *echoWriter) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Len()
}
