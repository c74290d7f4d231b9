package e2e

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// TestPythonSDK runs the Python SDK's pytest suite (sdk/python/tests)
// against a real daemon booting TCG guests: the daemon listens on its unix
// socket (which the SDK finds through $AGENTBOX_SOCKET, as the CLI does)
// and on a TCP port with a bearer token. The suite restarts the daemon
// mid-session through a control socket this test serves: "restart\n" kills
// the daemon with SIGKILL and starts it again on the same state, answering
// "ok\n" once it answers. The test fails when pytest does, and when the
// suite left a sandbox or snapshot behind.
func TestPythonSDK(t *testing.T) {
	py := pythonWithPytest(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	token := hex.EncodeToString(randomBytes(32))
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A fixed port, so that the restarted daemon listens where the first did.
	addr := freeTCPAddr(t)
	// The template "sdk" (the test image) is what the suite's
	// create(template="sdk") boots.
	d := newDaemon(t, "--listen-tcp", addr, "--template", "sdk="+testenv.Image(t))
	d.Globals = []string{"--token-file", tokenFile}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}

	ctl := filepath.Join(testenv.ShortTempDir(t), "ctl.sock")
	ln, err := net.Listen("unix", ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	restarts := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			answer := "ok\n"
			if strings.TrimSpace(line) != "restart" {
				answer = fmt.Sprintf("error: unknown request %q\n", line)
			} else {
				d.Kill9()
				if err := d.Start(); err != nil {
					answer = "error: " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
				} else {
					restarts++
				}
			}
			c.Write([]byte(answer))
			c.Close()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rsP", "--durations=8",
		filepath.Join(root, "sdk", "python", "tests"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"AGENTBOX_CONFIG=", "AGENTBOX_HOST=", "AGENTBOX_TOKEN=", "AGENTBOX_TOKEN_FILE=",
		"AGENTBOX_SOCKET="+d.Socket,
		"AGENTBOX_IMAGE="+testenv.Image(t),
		"AGENTBOX_SDK_TEST_CONTROL="+ctl,
		"AGENTBOX_SDK_TEST_URL=http://"+addr,
		"AGENTBOX_SDK_TEST_TOKEN="+token,
		"AGENTBOX_SDK_TEST_TOKEN_FILE="+tokenFile,
		"AGENTBOX_SDK_TEST_ALL=1",
		"AGENTBOX_TEST_STRICT=1",
		"PYTHONDONTWRITEBYTECODE=1",
	)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s -m pytest sdk/python/tests (%s):\n%s", py, time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatalf("pytest failed: %v", err)
	}
	if restarts != 1 {
		t.Errorf("the suite restarted the daemon %d times, want 1", restarts)
	}
	if left := d.list(""); len(left) != 0 {
		t.Errorf("the suite left sandboxes: %v", ids(left))
	}
	var snaps struct {
		Snapshots []struct {
			Name string `json:"name"`
		} `json:"snapshots"`
	}
	d.callJSON("GET", "/v1/snapshots", nil, 200, &snaps)
	if len(snaps.Snapshots) != 0 {
		t.Errorf("the suite left snapshots: %+v", snaps.Snapshots)
	}
}

// pythonWithPytest returns a Python interpreter that has pytest and yaml
// (Debian's python3-pytest and python3-yaml, which tests/host-setup.sh
// installs): $AGENTBOX_TEST_PYTHON, else python3 on the PATH, else
// Debian's /usr/bin/python3 (a PATH may put another python3 first).
func pythonWithPytest(t *testing.T) string {
	t.Helper()
	candidates := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("AGENTBOX_TEST_PYTHON"); p != "" {
		candidates = []string{p}
	}
	var tried []string
	for _, p := range candidates {
		out, err := exec.Command(p, "-c", "import sys, pytest, yaml; print(sys.version_info >= (3, 9))").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "True" {
			return p
		}
		tried = append(tried, fmt.Sprintf("%s: %v %s", p, err, strings.TrimSpace(string(out))))
	}
	t.Fatalf("no Python >= 3.9 with pytest and yaml (install python3-pytest python3-yaml: tests/host-setup.sh does; or set AGENTBOX_TEST_PYTHON):\n%s", strings.Join(tried, "\n"))
	return ""
}

// freeTCPAddr returns 127.0.0.1:PORT with a port nothing listens on now.
func freeTCPAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
