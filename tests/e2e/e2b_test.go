package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// e2bDir returns tests/e2b with the pinned `e2b` npm package installed,
// or skips (a failure under AGENTBOX_TEST_STRICT) saying how to install
// it.
func e2bDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "e2b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		testenv.SkipOrFail(t, "node not found: the E2B tests run the e2b npm package on Node.js ≥ 20.18 (the npm package nodejs)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		testenv.SkipOrFail(t, "the e2b package is not installed in tests/e2b: run `make deps` (npm ci in tests/e2b)")
	}
	return dir
}

// freeLoopbackAddr returns a 127.0.0.1 address whose port was free a
// moment ago (the E2B SDK needs the address before the daemon starts).
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestE2BSDK runs tests/e2b/sdk.test.mjs — the unmodified `e2b` SDK,
// pinned in tests/e2b/package-lock.json — with node's test runner
// against `agentbox serve --e2b-listen ADDR --template base=IMAGE` (the
// daemon's token as the API key), plus a sandbox made by `agentbox
// create --template base` that the SDK must connect to. The SDK's
// sandboxes are ordinary ones: the daemon's cleanup removes whatever is
// left and checks nothing leaked.
func TestE2BSDK(t *testing.T) {
	dir := e2bDir(t)
	image := testenv.Image(t)
	token := hex.EncodeToString(randomBytes(32))
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	d := newDaemon(t, "--e2b-listen", addr, "--template", "base="+image)
	d.Globals = []string{"--token-file", tokenFile}
	if err := d.Start(); err != nil {
		if strings.Contains(d.Log.String(), "flag provided but not defined: -e2b-listen") {
			t.Fatalf("this agentbox has no `serve --e2b-listen`: the E2B front (vmctl/e2b) is not in the build, so the SDK has nothing to talk to:\n%v", err)
		}
		t.Fatal(err)
	}

	r := d.cli(nil, "create", "--template", "base", "--accel", "tcg", "--name", "e2b-made-by-cli")
	if r.code != 0 {
		t.Fatalf("agentbox create --template base: exit %d, %s", r.code, r.stderr)
	}
	created := strings.TrimSpace(string(r.stdout))
	d.Track(created)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-reporter=spec", "--test-timeout=600000", "sdk.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL=http://"+addr, "E2B_SANDBOX_URL=http://"+addr, "E2B_API_KEY="+token,
		"E2B_DOMAIN=", "E2B_DEBUG=false", // nothing of the developer's own E2B setup
		"AGENTBOX_E2B_CREATED="+created, "AGENTBOX_E2B_RUN=run"+hex.EncodeToString(randomBytes(4)))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		t.Fatalf("node --test sdk.test.mjs: %v\n%s", err, out.String())
	}
	t.Logf("node --test sdk.test.mjs:\n%s", out.String())
	for _, want := range []string{"ℹ fail 0\n", "ℹ cancelled 0\n", "ℹ skipped 0\n", "ℹ todo 0\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("node --test's summary lacks %q: every test must run and pass", strings.TrimSpace(want))
		}
	}
}
