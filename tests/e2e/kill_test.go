package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// orphanDeadline is how long the domain and QEMU of a killed in-process
// run may outlive it (libvirt's autodestroy acts when the connection
// closes; QEMU needs a moment to exit).
const orphanDeadline = 15 * time.Second

// TestRunKill9DuringBoot: kill -9 of an in-process `agentbox run` while
// its guest boots leaves no domain and no QEMU within seconds; the next
// run removes the run's directory and sockets and says so.
func TestRunKill9DuringBoot(t *testing.T) {
	t.Parallel()
	state, runtime := killDirs(t)
	cmd, stderr := killable(t, state, runtime, "true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitQEMU(t, cmd, state, stderr)
	killed(t, cmd)
	assertOrphansGone(t, state, runtime)
}

// TestRunKill9DuringExec: the same while the guest runs the command.
func TestRunKill9DuringExec(t *testing.T) {
	t.Parallel()
	state, runtime := killDirs(t)
	cmd, stderr := killable(t, state, runtime, "sh", "-c", "echo started; exec sleep 100")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("first line %q, %v; stderr %s", line, err, stderr)
	}
	killed(t, cmd)
	assertOrphansGone(t, state, runtime)
}

// waitQEMU waits (up to 2 minutes) until the started cmd's domain has a
// QEMU process (it boots from state); else it kills cmd and fails.
func waitQEMU(t *testing.T, cmd *exec.Cmd, state string, stderr fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !qemuRunningFor(state) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no qemu process appeared; stderr %s", stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killDirs returns a test's state and runtime dirs, checked for leaks at
// its end.
func killDirs(t *testing.T) (state, runtime string) {
	state, runtime = t.TempDir(), testenv.ShortTempDir(t)
	t.Cleanup(func() {
		testenv.AssertNoDomains(t, nil, state, runtime)
		testenv.AssertNoLeaks(t, state, runtime)
	})
	return state, runtime
}

// killable prepares an in-process `agentbox run` of argv in state and
// runtime; the caller starts it.
func killable(t *testing.T, state, runtime string, argv ...string) (*exec.Cmd, *bytes.Buffer) {
	args := append([]string{"--uri", testenv.URI(), "--state-dir", state, "--runtime-dir", runtime, "run", "--local", "--image", testenv.Image(t), "--accel", "tcg", "--"}, argv...)
	cmd := exec.Command(agentboxBin, args...)
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	return cmd, &stderr
}

// killed sends cmd SIGKILL and reaps it.
func killed(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
}

// assertOrphansGone checks what a killed in-process run left: within
// orphanDeadline no domain and no QEMU of it; its directory (overlay,
// store) still there until the next run, which removes it and its
// runtime dir, says so on stderr, and runs normally.
func assertOrphansGone(t *testing.T, state, runtime string) {
	t.Helper()
	deadline := time.Now().Add(orphanDeadline)
	for len(testenv.DomainsUsing(t, state, runtime)) > 0 || qemuRunningFor(state) {
		if time.Now().After(deadline) {
			t.Fatalf("%s after kill -9: domains %v, qemu running %v", orphanDeadline, testenv.DomainsUsing(t, state, runtime), qemuRunningFor(state))
		}
		time.Sleep(100 * time.Millisecond)
	}
	runs, _ := filepath.Glob(filepath.Join(state, "local", "*"))
	if len(runs) != 1 {
		t.Fatalf("run dirs after kill -9: %v, want the killed run's", runs)
	}
	id := filepath.Base(runs[0])

	cmd, stderr := killable(t, state, runtime, "echo", "next")
	out, err := cmd.Output()
	if err != nil || string(out) != "next\n" {
		t.Fatalf("next run: %q, %v; stderr %s", out, err, stderr)
	}
	want := "agentbox: removed what the in-process run " + id + " left behind (its process is gone): "
	if !strings.HasPrefix(stderr.String(), want) || !strings.Contains(stderr.String(), "dir "+runs[0]) ||
		!strings.Contains(stderr.String(), "runtime dir "+filepath.Join(runtime, "local-"+id)) || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("next run's stderr %q, want one line %q... naming the run dir and runtime dir", stderr, want)
	}
	if left, _ := filepath.Glob(filepath.Join(state, "local", "*")); len(left) != 0 {
		t.Errorf("left after the next run: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(runtime, "*")); len(left) != 0 {
		t.Errorf("runtime files left after the next run: %v", left)
	}
}
