package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/tests/testenv"
)

// TestMCPLocalEnds: `agentbox mcp --local` removes what its in-process
// service made (the sandbox left running, its overlay, store and audit
// under STATE/local/RUN-ID, its sockets under RUNTIME/local-RUN-ID)
// however the session ends: stdin closed, SIGTERM or SIGINT; a signal is
// a clean end (exit 0, no ERROR in the log).
func TestMCPLocalEnds(t *testing.T) {
	image := testenv.Image(t)
	for _, end := range []string{"eof", "SIGTERM", "SIGINT"} {
		t.Run(end, func(t *testing.T) {
			state, runtime := t.TempDir(), testenv.ShortTempDir(t)
			cmd := exec.Command(agentboxBin, "mcp", "--local")
			cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=", "AGENTBOX_SOCKET="+filepath.Join(runtime, "none.sock"),
				"AGENTBOX_URI="+testenv.URI(), "AGENTBOX_STATE_DIR="+state, "AGENTBOX_RUNTIME_DIR="+runtime, "AGENTBOX_IMAGE="+image)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var waitErr error
			exited := make(chan struct{})
			go func() { waitErr = cmd.Wait(); close(exited) }()
			defer func() {
				select {
				case <-exited:
				default:
					cmd.Process.Kill()
					<-exited
				}
			}()

			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &sdk.IOTransport{Reader: stdout, Writer: stdin}, nil)
			if err != nil {
				t.Fatalf("connect: %v\n%s", err, stderr.String())
			}
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{"name": "local-" + strings.ToLower(end)}})
			if err != nil || res.IsError {
				t.Fatalf("create_sandbox: %v %+v\n%s", err, res, stderr.String())
			}
			var sb struct{ ID, State string }
			b, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(b, &sb)
			if sb.State != "running" {
				t.Fatalf("create_sandbox: %s", b)
			}
			if left, _ := filepath.Glob(filepath.Join(state, "local", "*", "sandboxes", sb.ID, "overlay.qcow2")); len(left) != 1 {
				t.Fatalf("the sandbox's overlay under %s: %v", state, left)
			}

			switch end {
			case "eof":
				stdin.Close() // the client leaves without destroying its sandbox
			case "SIGTERM":
				cmd.Process.Signal(syscall.SIGTERM)
			case "SIGINT":
				cmd.Process.Signal(syscall.SIGINT)
			}
			select {
			case <-exited:
				if waitErr != nil {
					t.Fatalf("agentbox mcp --local after %s: %v\n%s", end, waitErr, stderr.String())
				}
			case <-time.After(2 * time.Minute):
				t.Fatalf("agentbox mcp --local still running 2 min after %s\n%s", end, stderr.String())
			}
			cs.Close()
			if strings.Contains(stderr.String(), "level=ERROR") {
				t.Errorf("errors logged on a clean end by %s:\n%s", end, stderr.String())
			}
			testenv.AssertNoLeaks(t, state, runtime)
			// Nothing else of the run is left: STATE holds only the shared
			// image verification cache and the (empty) directory of runs.
			entries, _ := os.ReadDir(state)
			for _, e := range entries {
				if e.Name() != "image-verify" && e.Name() != "local" {
					t.Errorf("left in the state dir: %s", e.Name())
				}
			}
		})
	}
}
