package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/audit"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// sessionStart is when the test session's first action happened.
var sessionStart = time.Date(2026, 11, 29, 14, 2, 11, 120_000_000, time.UTC)

// digestOf digests s the way the daemon does.
func digestOf(s string) *audit.OutputDigest {
	var d audit.OutputDigester
	d.Write([]byte(s))
	return d.Digest()
}

// session is a sandbox's life as the daemon would log it, with Go types
// in Args (as the daemon appends them).
func session() []audit.Entry {
	const sb = "3f2a9c1b0d4e"
	at := func(d time.Duration) time.Time { return sessionStart.Add(d) }
	many := strings.Repeat("line\n", 40)
	return []audit.Entry{
		{Time: at(0), Sandbox: sb, Caller: "uid:0", Action: audit.ActionCreate, DurationMs: 2100,
			Args: map[string]any{"image": "debian-minimal", "vcpus": 1, "memory_mib": 256, "name": "work1",
				"labels": map[string]string{"team": "ml"}, "ttl_ms": int64(3_600_000)}},
		{Time: at(2882 * time.Millisecond), Sandbox: sb, Caller: "uid:0", Action: audit.ActionExec, ExecID: "e000001",
			Args:     map[string]any{"cmd": []string{"python3", "-c", "print(1)"}, "cwd": "/", audit.ArgEnvKeys: []string{"HOME"}, "timeout_ms": 30000, "uid": uint32(1000)},
			ExitCode: intPtr(0), DurationMs: 41, BytesOut: 2, Stdout: digestOf("1\n"), Stderr: digestOf("")},
		{Time: at(4180 * time.Millisecond), Sandbox: sb, Caller: "uid:0", Action: audit.ActionUpload,
			Args: map[string]any{"path": "/work/data.csv", "mode": "0644"}, BytesIn: 50 << 20, DurationMs: 1900},
		{Time: at(48900 * time.Millisecond), Sandbox: sb, Caller: "uid:0", Action: audit.ActionExec, ExecID: "e000002",
			Args:     map[string]any{"cmd": []string{"sh", "-c", "echo oops >&2; exit 3"}, "cwd": "/work"},
			ExitCode: intPtr(3), DurationMs: 30, Stderr: digestOf("oops\n")},
		// Output with more lines than shown, and a head cut by HeadBytes.
		{Time: at(50 * time.Second), Sandbox: sb, Caller: "uid:0", Action: audit.ActionExec, ExecID: "e000003",
			Args:     map[string]any{"cmd": []string{"seq", "40"}},
			ExitCode: intPtr(0), DurationMs: 12, Stdout: digestOf(many)},
		{Time: at(51 * time.Second), Sandbox: sb, Caller: "uid:0", Action: audit.ActionExec, ExecID: "e000004",
			Args:     map[string]any{"cmd": []string{"cat", "big.log"}, "cwd": "/work dir"},
			ExitCode: intPtr(0), DurationMs: 75_300, Stdout: digestOf("first\tline\x1b[31m red?\r\n" + strings.Repeat("y", 3000))},
		// Control characters and quotes in argv.
		{Time: at(52 * time.Second), Sandbox: sb, Caller: "uid:0", Action: audit.ActionExec, ExecID: "e000005",
			Args:     map[string]any{"cmd": []string{"printf", "%s\\n", "it's", "a\nb", "\x1b]0;pwned\x07", ""}},
			ExitCode: intPtr(0), DurationMs: 2, Stdout: digestOf("it's\na\nb\n")},
		{Time: at(60 * time.Second), Sandbox: sb, Caller: "token", Action: audit.ActionDownload,
			Args: map[string]any{"path": "/etc/shadow"}, DurationMs: 4,
			Error: "not_found", ErrorMessage: "file /etc/shadow does not exist in sandbox work1: check the path with agentbox ls"},
		{Time: at(61 * time.Second), Sandbox: sb, Caller: "uid:1000", Action: audit.ActionProcessStart, ExecID: "e000006",
			Args: map[string]any{"cmd": []string{"python3", "-m", "http.server"}, "pid": 812, audit.ArgDetached: true}, DurationMs: 9},
		{Time: at(62 * time.Second), Sandbox: sb, Caller: "uid:1000", Action: audit.ActionProcessStdin, ExecID: "e000006",
			Args: map[string]any{"close": true}, BytesIn: 12},
		{Time: at(90 * time.Second), Sandbox: sb, Caller: "uid:1000", Action: audit.ActionProcessKill, ExecID: "e000006",
			Args: map[string]any{"signal": "TERM"}},
		{Time: at(90*time.Second + 120*time.Millisecond), Sandbox: sb, Caller: "daemon", Action: audit.ActionProcessExit, ExecID: "e000006",
			ExitCode: intPtr(143), DurationMs: 29_120, Stderr: digestOf("Keyboard\xffinterrupt\n")},
		{Time: at(95 * time.Second), Sandbox: sb, Caller: "uid:1000", Action: audit.ActionMkdir,
			Args: map[string]any{"path": "/work/out", "parents": true}, DurationMs: 1},
		// The log holds entries in the order actions ended: Replay sorts.
		{Time: at(10*time.Hour + 30*time.Second), Sandbox: sb, Caller: "daemon", Action: audit.ActionReap,
			Args: map[string]any{"reason": "ttl reached"}},
		{Time: at(10 * time.Hour), Sandbox: sb, Caller: "uid:0", Action: audit.ActionStop, DurationMs: 3400},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs (go test -run %s -update rewrites it):\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

func replay(t *testing.T, es []audit.Entry, opts replayOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := writeReplay(&buf, es, opts); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return buf.Bytes()
}

func TestReplayGolden(t *testing.T) {
	golden(t, "replay.golden", replay(t, session(), replayOptions{}))
}

func TestReplayColorGolden(t *testing.T) {
	got := replay(t, session(), replayOptions{Color: true, MaxOutputLines: 2, Name: "renamed"})
	if !bytes.Contains(got, []byte("\x1b[32mexit 0\x1b[0m")) || !bytes.Contains(got, []byte("\x1b[31mexit 3\x1b[0m")) {
		t.Fatalf("colour output lacks green exit 0 / red exit 3:\n%q", got)
	}
	// Only our own escapes: the guest's ESC bytes arrive escaped.
	if bytes.Contains(got, []byte("\x1b]")) || bytes.Contains(got, []byte("\x1b[31m red")) {
		t.Fatalf("guest escape sequences reached the output:\n%q", got)
	}
	golden(t, "replay_color.golden", got)
}

func TestReplayNoOutputLines(t *testing.T) {
	got := replay(t, session()[:5], replayOptions{MaxOutputLines: -1})
	if bytes.Contains(got, []byte("│")) || bytes.Contains(got, []byte("\n                ")) {
		t.Fatalf("MaxOutputLines -1 still shows output:\n%s", got)
	}
}

func TestReplaySeveralSandboxes(t *testing.T) {
	es := []audit.Entry{
		{Time: sessionStart, Sandbox: "aaaaaaaaaaaa", Caller: "uid:0", Action: audit.ActionCreate, Args: map[string]any{"image": "alpine", "name": "", "x": nil}, DurationMs: 900},
		{Time: sessionStart.Add(time.Second), Sandbox: "bbbbbbbbbbbb", Caller: "uid:1000", Action: audit.ActionExec,
			Args: map[string]any{"cmd": []string{"true"}}, ExitCode: intPtr(0), DurationMs: 5},
		{Time: sessionStart.Add(26 * time.Hour), Caller: "daemon", Action: audit.ActionReconcile, Args: map[string]any{"reason": "adopted 1, cleaned 1"}},
	}
	golden(t, "replay_multi.golden", replay(t, es, replayOptions{}))
}

func TestReplayEmptyAndSingle(t *testing.T) {
	if got := string(replay(t, nil, replayOptions{})); got != "no audit entries\n" {
		t.Fatalf("empty replay %q", got)
	}
	got := string(replay(t, []audit.Entry{{Time: sessionStart, Sandbox: "aaaaaaaaaaaa", Caller: "uid:0", Action: audit.ActionStop}}, replayOptions{}))
	want := "sandbox aaaaaaaaaaaa — 1 action, 2026-11-29 14:02:11 UTC\n" +
		"14:02:11.120  +0.000s  uid:0  stop\n"
	if got != want {
		t.Fatalf("single replay:\n%q\nwant\n%q", got, want)
	}
}

// What Read returns (Args decoded from JSON: []any, float64) renders the
// same as what the daemon appended.
func TestReplayAfterJSONRoundTrip(t *testing.T) {
	l, err := audit.Open(t.TempDir(), audit.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	for _, e := range session() {
		if err := l.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	var read []audit.Entry
	if err := l.Read(audit.Filter{Sandbox: "3f2a9c1b0d4e"}, func(e audit.Entry) error { read = append(read, e); return nil }); err != nil {
		t.Fatalf("Read: %v", err)
	}
	if got, want := replay(t, read, replayOptions{}), replay(t, session(), replayOptions{}); !bytes.Equal(got, want) {
		t.Fatalf("replay of read entries differs:\n%s\n--- want\n%s", got, want)
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"plain text":        "plain text",
		"a\tb":              "a       b",
		"12345678\tx":       "12345678        x",
		"\x1b[2Jcls\r":      `\x1b[2Jcls\x0d`,
		"bell\x07 \u0085":   `bell\x07 \u0085`,
		"bad\xff":           "bad\uFFFD",
		"rtl\u202eoverride": `rtl\u202eoverride`,
	} {
		if got := sanitize(in); got != want {
			t.Errorf("sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFormats(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                  "0.000s",
		2882 * time.Millisecond:            "2.882s",
		48900 * time.Millisecond:           "48.9s",
		59999 * time.Millisecond:           "59.9s",
		7*time.Minute + 29*time.Second:     "7m29s",
		2*time.Hour + 5*time.Minute + 59e9: "2h05m",
		76*time.Hour + 30*time.Minute:      "3d04h",
	} {
		if got := formatOffset(d); got != want {
			t.Errorf("formatOffset(%v) = %s, want %s", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{
		0:                           "0ms",
		41 * time.Millisecond:       "41ms",
		999 * time.Millisecond:      "999ms",
		2100 * time.Millisecond:     "2.1s",
		65 * time.Second:            "1m05s",
		2*time.Hour + 5*time.Minute: "2h05m",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %s, want %s", d, got, want)
		}
	}
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 50 << 20: "50.0 MiB", 3 << 30: "3.0 GiB", 5 << 40: "5.0 TiB", 5 << 50: "5120.0 TiB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestFormatSetting(t *testing.T) {
	for d, want := range map[time.Duration]string{
		500 * time.Millisecond:     "500ms",
		30 * time.Second:           "30s",
		1500 * time.Millisecond:    "1.5s",
		time.Minute:                "1m",
		90 * time.Second:           "1m30s",
		time.Hour:                  "1h",
		time.Hour + 30*time.Minute: "1h30m",
	} {
		if got := formatSetting(d); got != want {
			t.Errorf("formatSetting(%v) = %s, want %s", d, got, want)
		}
	}
}

func intPtr(i int) *int { return &i }
