package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// TestAttachTmux: `exec -d -t SB -- bash` keeps a shell on a terminal in
// the guest, and `attach -it` in a tmux pane drives it like a person:
// the prompt, `stty size` equal to the pane and following its resize, a
// command typed, Ctrl-P Ctrl-Q detaching (the shell runs on in `ps`);
// the daemon is killed with -9 and restarted while nobody is attached;
// the next attach finds the same shell (a variable set before is still
// there), and `exit 3` ends it with 3 locally and in `ps`. Bad input:
// resizing a process without a terminal, attaching to a missing one.
func TestAttachTmux(t *testing.T) {
	d := startDaemon(t)
	img := testenv.Image(t)
	r := d.cli(nil, "create", "--image", img, "--name", "att1", "--accel", "tcg")
	if r.code != 0 {
		t.Fatalf("create: %d %s", r.code, r.stderr)
	}
	d.Track(strings.TrimSpace(string(r.stdout)))

	r = d.cli(nil, "exec", "-d", "-t", "-e", "PS1=[att]", "att1", "--", "bash", "--norc", "--noprofile")
	if r.code != 0 {
		t.Fatalf("exec -d -t: %d %s", r.code, r.stderr)
	}
	proc := strings.TrimSpace(string(r.stdout))
	// Not started from a terminal: the default size.
	psRow := func(state string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(proc) + `\s+\d+\s+` + state + `\s+bash --norc --noprofile$`)
	}
	if ps := d.cli(nil, "ps", "att1"); !psRow(`running\s+-\s+24x80`).Match(ps.stdout) {
		t.Fatalf("ps before attaching:\n%s%s", ps.stdout, ps.stderr)
	}

	dir := t.TempDir()
	// The pane attaches, records the exit status, waits for a line, then
	// attaches again.
	cmd := fmt.Sprintf("AGENTBOX_CONFIG= AGENTBOX_HOST= %s --socket %s attach -it att1 %s", agentboxBin, d.Socket, proc)
	script := fmt.Sprintf(`%[2]s
echo "rc=$?" > %[1]s/rc1.tmp && mv %[1]s/rc1.tmp %[1]s/rc1
echo detached-back
read x
%[2]s
echo "rc=$?" > %[1]s/rc2.tmp && mv %[1]s/rc2.tmp %[1]s/rc2
echo local-shell-back
exec sleep 3600
`, dir, cmd)
	tm := startTmux(t, 100, 30, script)

	// Only new output comes: Enter asks for a prompt.
	deadline := time.Now().Add(2 * time.Minute)
	for ps := d.cli(nil, "ps", "att1"); !psRow(`running\s+-\s+30x100`).Match(ps.stdout); ps = d.cli(nil, "ps", "att1") {
		if time.Now().After(deadline) {
			t.Fatalf("the attach did not resize the terminal to the pane's; ps:\n%s\nthe pane:\n%s", ps.stdout, tm.screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
	tm.keys("Enter")
	tm.waitLast("[att]")
	tm.typeLine("stty size")
	tm.waitScreen(`(?m)^30 100$`)
	tm.run("resize-window", "-t", "e2e", "-x", "120", "-y", "40")
	testenv.WaitFor(t, time.Minute, "the pane to resize", func() bool { return tm.size() == "40 120" })
	// The client sends the resize beside typed bytes: type once the
	// process has the new size.
	testenv.WaitFor(t, time.Minute, "the process's terminal to resize", func() bool {
		return psRow(`running\s+-\s+40x120`).Match(d.cli(nil, "ps", "att1").stdout)
	})
	tm.typeLine("clear; stty size")
	tm.waitScreen(`(?m)^40 120$`)
	tm.typeLine("X=kept; echo first-$((6*7))")
	tm.waitScreen(`(?m)^first-42$`)

	tm.keys("C-p", "C-q")
	tm.waitScreen(`(?m)^detached-back$`)
	tm.waitScreen(`agentbox: detached from process ` + regexp.QuoteMeta(proc) + `; it runs on`)
	if rc, err := os.ReadFile(filepath.Join(dir, "rc1")); err != nil || string(rc) != "rc=0\n" {
		t.Fatalf("exit status after the detach %q (%v), want rc=0", rc, err)
	}
	if ps := d.cli(nil, "ps", "att1"); !psRow(`running\s+-\s+40x120`).Match(ps.stdout) {
		t.Fatalf("ps after the detach:\n%s%s", ps.stdout, ps.stderr)
	}

	// The terminal outlives the daemon.
	d.Kill9()
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if ps := d.cli(nil, "ps", "att1"); !psRow(`running\s+-\s+40x120`).Match(ps.stdout) {
		t.Fatalf("ps after the daemon's restart:\n%s%s", ps.stdout, ps.stderr)
	}

	tm.keys("Enter") // the pane's `read x`: attach again
	tm.typeLine("clear; echo x=$X second-$((6*7))")
	tm.waitScreen(`(?m)^x=kept second-42$`)
	tm.typeLine("exit 3")
	tm.waitScreen(`(?m)^local-shell-back$`)
	if rc, err := os.ReadFile(filepath.Join(dir, "rc2")); err != nil || string(rc) != "rc=3\n" {
		t.Fatalf("local exit status %q (%v), want rc=3", rc, err)
	}
	if ps := d.cli(nil, "ps", "att1"); !psRow(`exited\s+3\s+40x120`).Match(ps.stdout) {
		t.Fatalf("ps after exit 3:\n%s%s", ps.stdout, ps.stderr)
	}
	// Both sessions are in the audit.
	attaches := 0
	for _, e := range d.audit("att1") {
		if e.Action == "process.attach" && e.ExecID == proc {
			attaches++
		}
	}
	if attaches != 2 {
		t.Errorf("%d process.attach audit entries of %s, want 2", attaches, proc)
	}

	// Bad input.
	r = d.cli(nil, "exec", "-d", "att1", "--", "sleep", "1000")
	if r.code != 0 {
		t.Fatalf("exec -d: %d %s", r.code, r.stderr)
	}
	plain := strings.TrimSpace(string(r.stdout))
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://agentbox/v1/sandboxes/att1/processes/"+plain+"/resize", strings.NewReader(`{"rows":24,"cols":80}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), `"code":"invalid_argument"`) || !strings.Contains(string(body), "only a process started with a terminal") {
		t.Fatalf("resize of a process without a terminal: %d %s", resp.StatusCode, body)
	}
	expect(t, d.cli(nil, "attach", "att1", "e999999"), 125, "",
		"agentbox: process e999999: process not found: list the sandbox's processes (agentbox ps SANDBOX, GET /v1/sandboxes/{id}/processes) for valid ids\n")
	if ps := d.cli(nil, "ps", "att1"); !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(plain) + `\s+\d+\s+running\s+-\s+-\s+sleep 1000$`).Match(ps.stdout) {
		t.Fatalf("ps:\n%s", ps.stdout)
	}
}
