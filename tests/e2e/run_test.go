// Package e2e drives the real agentbox binary like a user does, against real
// guests booted under TCG from the test image (AGENTBOX_TEST_IMAGE).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// agentboxBin is the binary under test, built once by TestMain.
var agentboxBin string

func TestMain(m *testing.M) {
	testenv.RunWithAgentbox(m, "agentbox-e2e", &agentboxBin)
}

// result is what one `agentbox run` produced.
type result struct {
	stdout, stderr []byte
	code           int
}

// runOpts tune one invocation of the binary.
type runOpts struct {
	stdin  []byte   // nil: /dev/null
	global []string // global flags, before "run"
	flags  []string // extra run flags, before "--"
}

// run executes `agentbox run --image IMG --accel tcg FLAGS -- ARGV` with its
// own state and runtime dirs and asserts afterwards that nothing leaked.
func run(t *testing.T, o runOpts, argv ...string) result {
	t.Helper()
	cmd, stdout, stderr := command(t, o, argv...)
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("agentbox: %v", err)
	}
	r := result{stdout.Bytes(), stderr.Bytes(), code}
	t.Logf("exit %d, stderr: %.2000s", r.code, r.stderr)
	return r
}

// command prepares the agentbox process; the caller runs it.
func command(t *testing.T, o runOpts, argv ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	img := testenv.Image(t)
	state := t.TempDir()
	runtime := testenv.ShortTempDir(t)
	t.Cleanup(func() { testenv.AssertNoLeaks(t, state, runtime) })
	args := append([]string{"--uri", testenv.URI(), "--state-dir", state, "--runtime-dir", runtime}, o.global...)
	args = append(args, "run", "--image", img, "--accel", "tcg")
	args = append(args, o.flags...)
	args = append(args, "--")
	args = append(args, argv...)
	cmd := exec.Command(agentboxBin, args...)
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=") // no config file from the host
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if o.stdin != nil {
		cmd.Stdin = bytes.NewReader(o.stdin)
	}
	return cmd, &stdout, &stderr
}

func expect(t *testing.T, r result, code int, stdout, stderr string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d", r.code, code)
	}
	if string(r.stdout) != stdout {
		t.Errorf("stdout %q, want %q", r.stdout, stdout)
	}
	if string(r.stderr) != stderr {
		t.Errorf("stderr %q, want %q", r.stderr, stderr)
	}
}

func TestPython(t *testing.T) {
	t.Parallel()
	r := run(t, runOpts{}, "python3", "-c", "print(sum(range(10)))")
	expect(t, r, 0, "45\n", "")
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	// One boot per code would be slow; the codes 0/1 are covered by other
	// tests, 42 and a signal death here.
	r := run(t, runOpts{}, "sh", "-c", "echo out; echo err >&2; exit 42")
	expect(t, r, 42, "out\n", "err\n")
	r = run(t, runOpts{}, "sh", "-c", "kill -9 $$")
	expect(t, r, 137, "", "")
	r = run(t, runOpts{}, "false")
	expect(t, r, 1, "", "")
}

func TestStdinEnvWorkdir(t *testing.T) {
	t.Parallel()
	r := run(t, runOpts{stdin: []byte("hello\n")}, "tr", "a-z", "A-Z")
	expect(t, r, 0, "HELLO\n", "")
	r = run(t, runOpts{flags: []string{"--env", "K=V w", "--env", "EMPTY=", "--workdir", "/tmp", "--cpus", "2", "--memory", "384"}},
		"sh", "-c", `echo "$K|$EMPTY|$(pwd)|$(nproc)|$(awk '/MemTotal/{print ($2 > 300000 && $2 < 393216)}' /proc/meminfo)"`)
	expect(t, r, 0, "V w||/tmp|2|1\n", "")
}

func TestArgvExact(t *testing.T) {
	t.Parallel()
	args := []string{"a b", `q"uo'te`, "line1\nline2", "ünïcødé ✓", "", "$HOME", "*"}
	r := run(t, runOpts{}, append([]string{"printf", `%s\0`}, args...)...)
	want := strings.Join(args, "\x00") + "\x00"
	expect(t, r, 0, want, "")
}

func TestBinaryOutput(t *testing.T) {
	t.Parallel()
	// 10 MiB of random bytes; the guest reports their sha256 on stderr.
	r := run(t, runOpts{}, "sh", "-c", "head -c 10485760 /dev/urandom >/tmp/r && sha256sum </tmp/r >&2 && cat /tmp/r")
	if r.code != 0 || len(r.stdout) != 10<<20 {
		t.Fatalf("exit %d, %d bytes, want 0 and %d", r.code, len(r.stdout), 10<<20)
	}
	sum := sha256.Sum256(r.stdout)
	if got, want := hex.EncodeToString(sum[:]), strings.Fields(string(r.stderr))[0]; got != want {
		t.Fatalf("sha256 on host %s, in guest %s", got, want)
	}
	// NUL and invalid UTF-8 pass through unchanged, on both streams.
	r = run(t, runOpts{}, "sh", "-c", `printf 'a\000b\377\376c' ; printf '\300\000' >&2`)
	expect(t, r, 0, "a\x00b\xff\xfec", "\xc0\x00")
}

func TestConcurrentStreams(t *testing.T) {
	t.Parallel()
	// 5 MiB on stdout and 5 MiB on stderr at the same time: a pipe that is
	// not drained would deadlock.
	r := run(t, runOpts{}, "sh", "-c", `head -c 5242880 /dev/zero | tr '\0' o & head -c 5242880 /dev/zero | tr '\0' e >&2; wait`)
	if r.code != 0 || len(r.stdout) != 5<<20 || len(r.stderr) != 5<<20 {
		t.Fatalf("exit %d, stdout %d bytes, stderr %d bytes", r.code, len(r.stdout), len(r.stderr))
	}
	if bytes.Count(r.stdout, []byte("o")) != 5<<20 || bytes.Count(r.stderr, []byte("e")) != 5<<20 {
		t.Fatal("streams mixed up")
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	r := run(t, runOpts{}, "no-such-command", "arg")
	if r.code != 127 || len(r.stdout) != 0 || !bytes.Contains(r.stderr, []byte("no-such-command")) || !bytes.Contains(r.stderr, []byte("not found")) {
		t.Fatalf("exit %d stderr %q: want 127 and a not-found message", r.code, r.stderr)
	}
	r = run(t, runOpts{}, "/etc/hostname")
	if r.code != 126 {
		t.Fatalf("running a non-executable file: exit %d, want 126", r.code)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	// The command starts a server in the background and then hangs; on
	// timeout the whole process group dies. The VM is destroyed afterwards
	// anyway, so the in-guest check of the child lives in vmctl/sandbox.
	start := time.Now()
	r := run(t, runOpts{flags: []string{"--timeout", "3s"}}, "sh", "-c", "python3 -m http.server 8000 >/dev/null 2>&1 & echo started; sleep 100")
	if r.code != 124 || string(r.stdout) != "started\n" || !bytes.Contains(r.stderr, []byte("timed out")) {
		t.Fatalf("exit %d stdout %q: want 124 and started", r.code, r.stdout)
	}
	if el := time.Since(start); el < 3*time.Second {
		t.Fatalf("returned after %s, before the 3 s timeout", el)
	}
}

func TestGuestPanic(t *testing.T) {
	t.Parallel()
	r := run(t, runOpts{}, "sh", "-c", "echo c >/proc/sysrq-trigger; sleep 100")
	if r.code != 125 || !bytes.Contains(r.stderr, []byte("guest died")) || !bytes.Contains(r.stderr, []byte("sysrq")) {
		t.Fatalf("exit %d: want 125 with 'guest died' and the console's sysrq lines", r.code)
	}
}

func TestSignalTearsDown(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd, _, stderr := command(t, runOpts{}, "sh", "-c", "echo started; exec sleep 100")
		cmd.Stdout = nil
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "started\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("first line %q, %v; stderr %s", line, err, stderr)
		}
		cmd.Process.Signal(sig)
		err = cmd.Wait()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 128+int(sig) {
			t.Fatalf("%s: %v, want exit %d; stderr %s", sig, err, 128+int(sig), stderr)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	runtime := testenv.ShortTempDir(t)
	t.Cleanup(func() { testenv.AssertNoLeaks(t, state, runtime) })
	broken := t.TempDir()
	os.WriteFile(filepath.Join(broken, "manifest.toml"), []byte("format = 1\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--image", testenv.Image(t), "--accel", "tcg"}, "no command given"},
		{[]string{"run", "--accel", "tcg", "--", "true"}, "no image"},
		{[]string{"run", "--image", t.TempDir(), "--", "true"}, "has no manifest.toml"},
		{[]string{"run", "--image", broken, "--", "true"}, "invalid image"},
		{[]string{"run", "--image", testenv.Image(t), "--accel", "hvf", "--", "true"}, "want auto, kvm or tcg"},
		{[]string{"run", "--image", testenv.Image(t), "--env", "NOEQUALS", "--", "true"}, "want KEY=VALUE"},
		{[]string{"run", "--image", testenv.Image(t), "--accel", "tcg", "--memory", "1", "--", "true"}, "memory"},
		// The in-process service is held to the host's capacity as the
		// daemon is: refused at once, not a QEMU failure or a boot timeout.
		{[]string{"run", "--local", "--image", testenv.Image(t), "--accel", "tcg", "--memory", "100000000", "--", "true"}, "host capacity exceeded: the sandbox needs 100000000 MiB and 1 vCPUs"},
		{[]string{"run", "--local", "--image", testenv.Image(t), "--accel", "tcg", "--memory", "100000000", "--", "true"}, "ask for less with --cpus/--memory"},
		// A boot timeout, however short, says which flag to raise.
		{[]string{"run", "--local", "--image", testenv.Image(t), "--accel", "tcg", "--boot-timeout", "1ms", "--", "true"}, "guest agent did not answer within 1ms (a TCG boot takes seconds: raise --boot-timeout"},
	}
	for _, tc := range cases {
		args := append([]string{"--uri", testenv.URI(), "--state-dir", state, "--runtime-dir", runtime}, tc.args...)
		cmd := exec.CommandContext(context.Background(), agentboxBin, args...)
		cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=", "AGENTBOX_IMAGE=")
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: %v %q, want exit 125 mentioning %q", tc.args, err, out, tc.want)
		}
	}
}

func TestConfigFile(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, []byte("accel = \"tcg\"\nenv = [\"FROM_CONFIG=yes\"]\nmemory = 320\n"), 0o644)
	r := run(t, runOpts{global: []string{"--config", cfg}}, "sh", "-c", `echo $FROM_CONFIG`)
	expect(t, r, 0, "yes\n", "")
	os.WriteFile(cfg, []byte("acel = \"tcg\"\n"), 0o644)
	r = run(t, runOpts{global: []string{"--config", cfg}}, "true")
	if r.code != 125 || !bytes.Contains(r.stderr, []byte(`unknown key "acel"`)) {
		t.Fatalf("typo in config: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestStreamOneGiB(t *testing.T) {
	t.Parallel()
	// 1 GiB through the agent in constant memory on both ends: the host's
	// agentbox process (max RSS) and the guest agent, PID 1 (VmHWM).
	cmd, _, stderr := command(t, runOpts{}, "sh", "-c", "head -c 1073741824 /dev/zero; grep VmHWM /proc/1/status >&2")
	var n countingWriter
	cmd.Stdout = &n
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The host side's peak RSS is agentbox's VmHWM, sampled until it exits.
	// (wait4's ru_maxrss would also count the RSS of this test binary,
	// which the vfork'ed child shared before its exec.)
	done := make(chan struct{})
	hwm := make(chan int, 1)
	go func() {
		peak := 0
		for {
			if v := vmHWM(cmd.Process.Pid); v > peak {
				peak = v
			}
			select {
			case <-done:
				hwm <- peak
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	hostRSS := <-hwm
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if n != 1<<30 {
		t.Fatalf("streamed %d bytes, want %d", n, 1<<30)
	}
	var guestKiB int
	fmt.Sscanf(strings.TrimPrefix(strings.TrimSpace(stderr.String()), "VmHWM:"), "%d", &guestKiB)
	t.Logf("host agentbox max RSS %d KiB, guest agent VmHWM %d KiB", hostRSS, guestKiB)
	if hostRSS == 0 || hostRSS > 100<<10 || guestKiB == 0 || guestKiB > 64<<10 {
		t.Fatalf("memory grew with the stream: host %d KiB, guest agent %d KiB (stderr %q)", hostRSS, guestKiB, stderr)
	}
}

// vmHWM returns the peak resident set (KiB) of process pid, or 0.
func vmHWM(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kib int
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kib)
			return kib
		}
	}
	return 0
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

func TestKeep(t *testing.T) {
	t.Parallel()
	cmd, stdout, stderr := command(t, runOpts{flags: []string{"--keep"}}, "sh", "-c", "echo kept >/root/marker")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	out := stderr.String()
	var domain, sock string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "agent" && f[1] == "socket:" {
			sock = f[2]
		}
		if i := strings.Index(l, "(domain "); i >= 0 {
			domain = strings.Fields(l[i+len("(domain "):])[0]
			domain = strings.TrimSuffix(domain, ",")
		}
	}
	if domain == "" || sock == "" || stdout.Len() != 0 {
		t.Fatalf("--keep output lacks domain or socket: %q", out)
	}
	// The kept sandbox still runs and answers on its agent socket; then
	// remove it the way the message says.
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("agent socket: %v", err)
	}
	state, err := exec.Command("virsh", "-c", testenv.URI(), "domstate", domain).CombinedOutput()
	if err != nil || strings.TrimSpace(string(state)) != "running" {
		t.Fatalf("kept domain %s: %s %v", domain, state, err)
	}
	// `agentbox exec` reaches the kept sandbox through its agent socket.
	ex := exec.Command(agentboxBin, "exec", "--agent-socket", sock, "--", "cat", "/root/marker")
	ex.Env = append(os.Environ(), "AGENTBOX_CONFIG=")
	if out, err := ex.Output(); err != nil || string(out) != "kept\n" {
		t.Fatalf("exec in the kept sandbox: %q, %v", out, err)
	}
	var remove string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "remove:") {
			remove = strings.TrimSpace(strings.SplitN(l, "remove:", 2)[1])
		}
	}
	if out, err := exec.Command("sh", "-c", remove).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v %s", remove, err, out)
	}
}

func TestSignalDuringBoot(t *testing.T) {
	t.Parallel()
	cmd, _, stderr := command(t, runOpts{}, "true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the domain's qemu process exists, then interrupt the boot.
	state := cmd.Args[4] // --uri U --state-dir DIR: DIR is the 5th argument
	waitQEMU(t, cmd, state, stderr)
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 130 {
		t.Fatalf("SIGINT during boot: %v, want exit 130; stderr %s", err, stderr)
	}
}

// qemuRunningFor reports whether a qemu process mentions dir on its
// command line.
func qemuRunningFor(dir string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte("qemu-system")) && bytes.Contains(b, []byte(dir)) {
			return true
		}
	}
	return false
}
