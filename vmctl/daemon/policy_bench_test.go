package daemon_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/policy"
)

// benchRules is a rule file of the size an operator would write: every
// exec is matched against the deny rules and gets the exec changes.
const benchRules = `
[[deny]]
argv = ["rm", "-rf", "**"]
reason = "no recursive deletes"
[[deny]]
paths = ["/etc/**"]
tools = ["file.write"]
reason = "read-only"
[[deny]]
tools = ["exec"]
labels = { tier = "readonly" }
reason = "read-only sandbox"
[[exec]]
strip_env = ["AWS_*"]
[[exec]]
argv = ["/bin/true"]
max_timeout_ms = 600000
`

// BenchmarkExecPolicy measures an attached exec's round trip (`true` in
// a real TCG guest, through the daemon's Exec) without a policy plugin
// and with cmd/agentbox-policy (built here) deciding every exec, side by
// side in one run: go test -run '^$' -bench ExecPolicy ./vmctl/daemon.
// Timeout/ runs commands with a timeout (asked, or forced by the
// plugin's max_timeout_ms: a modify decision); Plain/ without (the
// plugin's decision is a modify stripping AWS_* from the env).
func BenchmarkExecPolicy(b *testing.B) {
	img := testenv.Image(b)
	ctx := context.Background()
	conn, err := libvirt.Connect(ctx, libvirt.Config{URI: testenv.URI()})
	if err != nil {
		testenv.SkipOrFail(b, "libvirt: %v", err)
	}
	defer conn.Close()

	dir := b.TempDir()
	bin, rules := filepath.Join(dir, "agentbox-policy"), filepath.Join(dir, "rules.toml")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/agentbox/agentbox/cmd/agentbox-policy").CombinedOutput(); err != nil {
		b.Fatalf("building agentbox-policy: %v\n%s", err, out)
	}
	if err := os.WriteFile(rules, []byte(benchRules), 0o600); err != nil {
		b.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		plugin bool
	}{{"NoPolicy", false}, {"Plugin", true}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := daemon.Config{Driver: libvirt.NewDriver(conn, libvirt.WithAutoDestroy()), StateDir: b.TempDir(), RuntimeDir: testenv.ShortTempDir(b)}
			if tc.plugin {
				pc, err := policy.NewClient([]string{bin, "--rules", rules}, policy.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer pc.Close()
				cfg.Policy = pc
			}
			d, err := daemon.New(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Shutdown(context.Background())
			sb, err := d.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img, Accel: "tcg"})
			if err != nil {
				b.Fatal(err)
			}
			defer d.DeleteSandbox(context.Background(), sb.ID, true)
			for _, v := range []struct {
				name string
				req  api.ExecRequest
			}{
				{"Plain", api.ExecRequest{Cmd: []string{"true"}}},
				// The plugin forces the timeout of /bin/true (its rule);
				// without it, the request asks for the same.
				{"Timeout", api.ExecRequest{Cmd: []string{"/bin/true"}, TimeoutMs: map[bool]int64{false: 600000, true: 0}[tc.plugin]}},
			} {
				b.Run(v.name, func(b *testing.B) {
					run := func() time.Duration {
						t := time.Now()
						st, err := d.Exec(ctx, sb.ID, v.req, func(string, int) {}, io.Discard, io.Discard)
						if err != nil || st.ExitCode != 0 {
							b.Fatalf("exec: %+v, %v", st, err)
						}
						return time.Since(t)
					}
					run() // the plugin started, the guest warm
					var total time.Duration
					for b.Loop() {
						total += run()
					}
					b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/exec")
				})
			}
		})
	}
}
