package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/tests/testenv"
)

// tmux is a private tmux server (its own socket) with one detached
// session whose pane runs a script.
type tmux struct {
	t    *testing.T
	sock string
}

// startTmux runs script with sh in a new detached session of cols x rows.
func startTmux(t *testing.T, cols, rows int, script string) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		testenv.SkipOrFail(t, "tmux is not installed (tests/host-setup.sh installs it)")
	}
	dir := testenv.ShortTempDir(t)
	tm := &tmux{t: t, sock: filepath.Join(dir, "tmux.sock")}
	path := filepath.Join(dir, "pane.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tm.run("-f", "/dev/null", "new-session", "-d", "-s", "e2e", "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows), "sh "+path)
	tm.run("set-option", "-g", "status", "off")
	t.Cleanup(func() { exec.Command("tmux", "-S", tm.sock, "kill-server").Run() })
	return tm
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.sock}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

// keys sends keys to the pane (tmux key names: "Enter", "C-c").
func (tm *tmux) keys(keys ...string) { tm.run(append([]string{"send-keys", "-t", "e2e"}, keys...)...) }

// typeLine types text literally, then Enter.
func (tm *tmux) typeLine(text string) {
	tm.run("send-keys", "-t", "e2e", "-l", text)
	tm.keys("Enter")
}

// screen is the pane's text.
func (tm *tmux) screen() string { return tm.run("capture-pane", "-p", "-t", "e2e") }

// size is the pane's "ROWS COLS".
func (tm *tmux) size() string {
	return strings.TrimSpace(tm.run("display-message", "-p", "-t", "e2e", "#{pane_height} #{pane_width}"))
}

// waitScreen waits until the pane's text matches re.
func (tm *tmux) waitScreen(re string) {
	tm.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s := tm.screen()
		if rx.MatchString(s) {
			return
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the pane never matched %q; it shows:\n%s", re, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// typeUntil types line until the pane's text matches re: for a line
// whose answer depends on an event racing with the typing (a resize the
// client sends beside the typed bytes).
func (tm *tmux) typeUntil(line, re string) {
	tm.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		tm.typeLine(line)
		for wait := time.Now().Add(5 * time.Second); time.Now().Before(wait); time.Sleep(100 * time.Millisecond) {
			if rx.MatchString(tm.screen()) {
				return
			}
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the pane never matched %q; it shows:\n%s", re, tm.screen())
		}
	}
}

// waitLast waits until the pane's last non-empty line is want (trailing
// spaces aside: capture-pane drops them).
func (tm *tmux) waitLast(want string) {
	tm.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s := tm.screen()
		lines := strings.Split(strings.TrimRight(s, " \n"), "\n")
		if strings.TrimRight(lines[len(lines)-1], " ") == want {
			return
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the pane's last line never became %q; it shows:\n%s", want, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPtyTmux drives `agentbox exec -it SB -- bash` in a tmux pane like a
// person at a terminal: the prompt, the terminal's size and its change,
// a python3 REPL, Ctrl-C echoed and caught by a foreground program, Ctrl-C
// of a foreground sleep with the shell surviving,
// `exit 3` as the local exit status, the local terminal restored; then
// the session in the audit (--replay, --play).
func TestPtyTmux(t *testing.T) {
	d := startDaemon(t)
	img := testenv.Image(t)
	r := d.cli(nil, "create", "--image", img, "--name", "tty1", "--accel", "tcg")
	if r.code != 0 {
		t.Fatalf("create: %d %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(string(r.stdout))
	d.Track(id)

	dir := t.TempDir()
	// The pane: save the terminal's settings, run the session, save its
	// exit status and the settings again, then stay for capture-pane.
	script := fmt.Sprintf(`stty -g > %[1]s/before
AGENTBOX_CONFIG= AGENTBOX_HOST= %[2]s --socket %[3]s exec -it -e 'PS1=[ptytest]' tty1 -- bash --norc --noprofile
echo "rc=$?" > %[1]s/rc.tmp && mv %[1]s/rc.tmp %[1]s/rc
stty -g > %[1]s/after
echo local-shell-back
exec sleep 3600
`, dir, agentboxBin, d.Socket)
	tm := startTmux(t, 100, 30, script)

	tm.waitLast("[ptytest]")
	tm.typeLine("stty size")
	tm.waitScreen(`(?m)^` + regexp.QuoteMeta(tm.size()) + `$`)
	if tm.size() != "30 100" {
		t.Fatalf("pane size %q, want 30 100", tm.size())
	}

	// A resize of the pane reaches the guest's terminal.
	tm.run("resize-window", "-t", "e2e", "-x", "120", "-y", "40")
	testenv.WaitFor(t, time.Minute, "the pane to resize", func() bool { return tm.size() == "40 120" })
	tm.typeUntil("clear; stty size", `(?m)^40 120$`)

	// A REPL with its own line editing.
	tm.typeLine("clear; python3")
	tm.waitLast(">>>")
	tm.typeLine("6*7")
	tm.waitScreen(`(?m)^42$`)
	tm.typeLine("exit()")
	tm.waitLast("[ptytest]")

	// Ctrl-C is a byte the guest's terminal turns into SIGINT for the
	// foreground job, echoing "^C" (ECHOCTL): a foreground program that
	// catches SIGINT and keeps the terminal as it is shows both, so the
	// echo proves the byte went through the guest's line discipline (a
	// Ctrl-C sent as a signal would echo nothing). The order of the two
	// is not fixed: the kernel signals first and writes its deferred echo
	// after (n_tty_receive_signal_char, flush_echoes).
	tm.typeLine("clear")
	tm.waitLast("[ptytest]")
	tm.typeLine(`python3 -c 'import signal,sys; signal.signal(signal.SIGINT, lambda s,f: print("got-"+"SIGINT", flush=True)); print("rea"+"dy", flush=True); sys.stdin.readline(); print("don"+"e")'`)
	tm.waitScreen(`(?m)^ready$`)
	tm.keys("C-c")
	tm.waitScreen(`(?m)^(\^Cgot-SIGINT|got-SIGINT\s*\n\^C)\s*$`)
	tm.keys("Enter")
	tm.waitScreen(`(?m)^done$`)
	tm.waitLast("[ptytest]")

	// A foreground sleep dies of it and the shell survives. Its "^C"
	// may show only at the shell's next write: the kernel echoes after
	// signalling, and a shell that already took the terminal back for
	// its prompt (readline: ECHO off) holds the echo until the next
	// output (seen in CI, one run in three: TestPtyTmux waited for the
	// "^C" line), so the prompt is matched with the echo or without.
	tm.typeLine("clear")
	tm.waitLast("[ptytest]")
	tm.typeLine("sleep 100")
	tm.waitLast("[ptytest]sleep 100")
	// The echoed line is not yet a running sleep: a Ctrl-C that reaches
	// bash between reading the line and starting the command aborts it
	// (status 130 from bash, not from sleep). Wait for the process.
	testenv.WaitFor(t, time.Minute, "sleep 100 to run in the guest", func() bool {
		return d.cli(nil, "exec", "tty1", "--", "sh", "-c", "grep -qx sleep /proc/[0-9]*/comm").code == 0
	})
	start := time.Now()
	tm.keys("C-c")
	tm.waitScreen(`(?m)^\[ptytest\]sleep 100\s*\n(\^C)?\s*\n\[ptytest\]\s*$`)
	if time.Since(start) > 90*time.Second {
		t.Fatal("sleep 100 was not interrupted") // a bound, not a timing assertion
	}
	tm.typeLine("echo status=$?")
	tm.waitScreen(`(?m)^status=130$`)

	tm.typeLine("exit 3")
	tm.waitScreen(`(?m)^local-shell-back$`)
	rc, err := os.ReadFile(filepath.Join(dir, "rc"))
	if err != nil || string(rc) != "rc=3\n" {
		t.Fatalf("local exit status %q (%v), want rc=3", rc, err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "before"))
	after, _ := os.ReadFile(filepath.Join(dir, "after"))
	if len(before) == 0 || string(before) != string(after) {
		t.Fatalf("the local terminal was not restored: stty -g before %q, after %q", before, after)
	}

	// The session is in the audit: its transcript and what was typed, and
	// it plays back.
	replay := d.cli(nil, "audit", "--replay", "tty1")
	for _, want := range []string{"$ bash --norc --noprofile", "exit 3", "│ 42", "typed: stty size", "terminal 30x100; play it: agentbox audit --play"} {
		if !strings.Contains(string(replay.stdout), want) {
			t.Errorf("audit --replay lacks %q:\n%s", want, replay.stdout)
		}
	}
	m := regexp.MustCompile(`play it: agentbox audit --play (e[0-9]+) `).FindSubmatch(replay.stdout)
	if m == nil {
		t.Fatalf("no exec ID to play in:\n%s", replay.stdout)
	}
	play := d.cli(nil, "audit", "--play", string(m[1]), "--speed", "0", "tty1")
	if play.code != 0 || !strings.Contains(string(play.stdout), "42\r\n") || !strings.Contains(string(play.stdout), "40 120\r\n") {
		t.Errorf("audit --play: exit %d, stdout %q, stderr %s", play.code, play.stdout, play.stderr)
	}
	var entry struct {
		Tty *struct {
			Rows   int `json:"rows"`
			Chunks []struct {
				Dir  string `json:"dir"`
				Rows int    `json:"rows"`
			} `json:"chunks"`
		} `json:"tty"`
		Stdin *struct {
			Bytes int64 `json:"bytes"`
		} `json:"stdin"`
		ExecID string `json:"exec_id"`
	}
	for _, line := range strings.Split(string(d.cli(nil, "audit", "--json", "tty1").stdout), "\n") {
		if strings.Contains(line, `"exec_id":"`+string(m[1])+`"`) {
			if err := json.Unmarshal([]byte(line), &entry); err != nil {
				t.Fatal(err)
			}
		}
	}
	resized := false
	if entry.Tty != nil {
		for _, c := range entry.Tty.Chunks {
			resized = resized || (c.Dir == "resize" && c.Rows == 40)
		}
	}
	if entry.Tty == nil || entry.Tty.Rows != 30 || !resized || entry.Stdin == nil || entry.Stdin.Bytes == 0 {
		t.Errorf("audit entry of the session: %+v", entry)
	}
}

// TestPtyStdinAndBadInput: piped stdin streams through the interactive
// exec (no detached process), and a resize of a command without a
// terminal is refused with a clear error that ends the session.
func TestPtyStdinAndBadInput(t *testing.T) {
	d := startDaemon(t)
	img := testenv.Image(t)
	r := d.cli(nil, "create", "--image", img, "--name", "in1", "--accel", "tcg")
	if r.code != 0 {
		t.Fatalf("create: %d %s", r.code, r.stderr)
	}
	d.Track(strings.TrimSpace(string(r.stdout)))

	expect(t, d.cli([]byte("hi\n"), "exec", "-i", "in1", "--", "cat"), 0, "hi\n", "")
	big := randomBytes(3 << 20)
	r = d.cli(big, "exec", "in1", "--", "sha256sum")
	if r.code != 0 || !strings.HasPrefix(string(r.stdout), sha(big)) {
		t.Fatalf("3 MiB through stdin: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	if ps := d.cli(nil, "ps", "in1"); strings.Contains(string(ps.stdout), "cat") || strings.Contains(string(ps.stdout), "sha256sum") {
		t.Errorf("stdin went through a detached process:\n%s", ps.stdout)
	}
	expect(t, d.cli([]byte("x"), "exec", "-it", "in1", "--", "cat"), 125, "", "agentbox: -t needs a terminal on stdin: run it from one, or drop -t to pipe stdin (-i)\n")

	// The raw protocol: resize of `cat` (no terminal).
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.Socket)
	}}}
	conn, _, err := websocket.Dial(ctx, "http://agentbox/v1/sandboxes/in1/exec/ws", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	send := func(m string) {
		if err := conn.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"type":"start","exec":{"cmd":["cat"]}}`)
	var msgs []string
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Fatalf("read: %v (messages %q)", err, msgs)
			}
			break
		}
		if typ == websocket.MessageText {
			msgs = append(msgs, string(data))
			if strings.Contains(string(data), `"started"`) {
				send(`{"type":"resize","tty":{"rows":24,"cols":80}}`)
			}
		}
	}
	if len(msgs) != 2 || !strings.Contains(msgs[1], `"type":"error"`) || !strings.Contains(msgs[1], `"code":"invalid_argument"`) || !strings.Contains(msgs[1], "runs without a terminal") {
		t.Fatalf("messages %q, want started then an invalid_argument error", msgs)
	}
	// The command was killed, and the exec is in the audit as cancelled
	// with what it said.
	testenv.WaitFor(t, time.Minute, "the refused session's audit entry", func() bool {
		for _, e := range d.audit("in1") {
			if e.Action == "exec" && e.Error != "" && fmt.Sprint(e.Args["cmd"]) == "[cat]" {
				return true
			}
		}
		return false
	})
}
