package e2e

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// followCLI is `agentbox output -f` running in the background.
type followCLI struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr bytes.Buffer
	got    []byte // stdout read so far
}

// follow starts `agentbox output -f [--offset N] SANDBOX PROCESS`.
func (d *daemon) follow(sb, proc string, offset int64) *followCLI {
	d.t.Helper()
	args := []string{"--socket", d.Socket, "output", "-f"}
	if offset > 0 {
		args = append(args, "--offset", strconv.FormatInt(offset, 10))
	}
	f := &followCLI{cmd: exec.Command(agentboxBin, append(args, sb, proc)...)}
	f.cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=", "AGENTBOX_HOST=")
	f.cmd.Stderr = &f.stderr
	out, err := f.cmd.StdoutPipe()
	if err != nil {
		d.t.Fatal(err)
	}
	f.stdout = bufio.NewReader(out)
	if err := f.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() {
		if f.cmd.ProcessState == nil {
			f.cmd.Process.Kill()
			f.cmd.Wait()
		}
	})
	return f
}

// untilLines reads whole lines until the output holds n of them.
func (f *followCLI) untilLines(t *testing.T, n int) {
	t.Helper()
	for bytes.Count(f.got, []byte("\n")) < n {
		line, err := f.stdout.ReadBytes('\n')
		f.got = append(f.got, line...)
		if err != nil {
			t.Fatalf("output -f ended after %d lines: %v (stderr %q)", bytes.Count(f.got, []byte("\n")), err, f.stderr.String())
		}
	}
}

// end reads the rest of the output and returns the CLI's exit code.
func (f *followCLI) end(t *testing.T) int {
	t.Helper()
	rest, _ := readAll(f.stdout)
	f.got = append(f.got, rest...)
	err := f.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// killCounter kills proc of sandbox sb (ID or name), a counter printing
// 1, 2, 3, … a line each, with `agentbox kill` and checks what two
// `output -f` showed of it: f1, cut by the daemon's death, then f2 from
// offset (where f1 stopped) until the kill's exit 137, together each
// number once and in order. It returns that output.
func (d *daemon) killCounter(t *testing.T, sb, proc string, f1, f2 *followCLI, offset int64) []byte {
	t.Helper()
	first := bytes.Count(f1.got, []byte("\n"))
	if r := d.cli(nil, "kill", sb, proc); r.code != 0 {
		t.Fatalf("kill: exit %d, stderr %q", r.code, r.stderr)
	}
	if code := f2.end(t); code != 137 {
		t.Fatalf("output -f after kill: exit %d, want 137 (stderr %q)", code, f2.stderr.String())
	}
	all := append(append([]byte(nil), f1.got...), f2.got...)
	got := strings.Split(strings.TrimSuffix(string(all), "\n"), "\n")
	for i, l := range got {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("line %d of the output is %q, want %d (first stream %d lines, then from offset %d)", i+1, l, i+1, first, offset)
		}
	}
	t.Logf("%d lines, %d before the daemon's death", len(got), first)
	return all
}

func readAll(r *bufio.Reader) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}

// TestDaemonProcessesSurviveRestart: a detached command printing a counter
// every 0.1 s outlives `kill -9` of the daemon; `output -f` resumes from
// the offset the cut stream printed, and the two streams together hold
// every line exactly once; `ps`, `kill`, the exit status in `ps`, the
// exec history and the audit work after the restart; a process that
// ended while no daemon ran has its end recorded once; an attached exec
// of the killed daemon was killed with its process group.
func TestDaemonProcessesSurviveRestart(t *testing.T) {
	d := startDaemon(t)
	sb := d.create(createBody(t, `"name":"procs","memory_mib":256`))

	res := d.cli(nil, "exec", "-d", sb.ID, "--", "sh", "-c", "i=0; while :; do i=$((i+1)); echo $i; sleep 0.1; done")
	if res.code != 0 {
		t.Fatalf("exec -d: exit %d, stderr %q", res.code, res.stderr)
	}
	proc := strings.TrimSpace(string(res.stdout))
	res = d.cli(nil, "exec", "-d", sb.ID, "--", "sh", "-c", "sleep 3; echo late; exit 3")
	if res.code != 0 {
		t.Fatalf("exec -d: exit %d, stderr %q", res.code, res.stderr)
	}
	late := strings.TrimSpace(string(res.stdout))

	// An attached command streaming when the daemon dies.
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	s, err := d.startExec(ctx, sb.ID, `{"cmd":["sh","-c","echo $$ > /tmp/attached.pid; echo up; exec sleep 1000"]}`)
	if err != nil || s.res.status != http.StatusOK {
		t.Fatalf("attached exec: %v %+v", err, s)
	}
	for !bytes.Contains(s.res.stdout, []byte("up\n")) {
		if _, err := s.next(); err != nil {
			t.Fatalf("attached exec before the kill: %v", err)
		}
	}

	f1 := d.follow(sb.ID, proc, 0)
	f1.untilLines(t, 15)
	d.Kill9()
	if code := f1.end(t); code != 125 {
		t.Fatalf("output -f cut by the daemon's death: exit %d, want 125 (stderr %q)", code, f1.stderr.String())
	}
	m := regexp.MustCompile(`resume from offset (\d+)`).FindStringSubmatch(f1.stderr.String())
	if m == nil {
		t.Fatalf("the cut output -f did not say where to resume: %q", f1.stderr.String())
	}
	resume, _ := strconv.ParseInt(m[1], 10, 64)
	if resume != int64(len(f1.got)) {
		t.Fatalf("resume offset %d, but %d bytes were printed", resume, len(f1.got))
	}
	time.Sleep(4 * time.Second) // the counter runs on and the short command ends meanwhile

	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	res = d.cli(nil, "ps", sb.ID)
	if res.code != 0 || !regexp.MustCompile(`(?m)^`+proc+`\s+\d+\s+running\s`).Match(res.stdout) ||
		!regexp.MustCompile(`(?m)^`+late+`\s+\d+\s+exited\s+3\s`).Match(res.stdout) {
		t.Fatalf("ps after the restart (exit %d):\n%s%s", res.code, res.stdout, res.stderr)
	}

	f2 := d.follow(sb.ID, proc, resume)
	f2.untilLines(t, 50) // ≥ 4 s of counting happened while no daemon ran
	all := d.killCounter(t, sb.ID, proc, f1, f2, resume)

	var p wireProcess
	d.callJSON("GET", "/v1/sandboxes/"+sb.ID+"/processes/"+proc, nil, http.StatusOK, &p)
	if p.State != "exited" || p.Exit == nil || p.Exit.ExitCode != 137 || p.Exit.Signal != 9 || p.OutputBytes != int64(len(all)) {
		t.Fatalf("process after kill: %+v (exit %+v); want exited 137 with %d output bytes", p, p.Exit, len(all))
	}
	exits := map[string][]int{}
	for _, e := range d.audit(sb.ID) {
		if e.Action == "process.exit" && e.ExitCode != nil {
			exits[e.ExecID] = append(exits[e.ExecID], *e.ExitCode)
		}
	}
	if len(exits[proc]) != 1 || exits[proc][0] != 137 || len(exits[late]) != 1 || exits[late][0] != 3 {
		t.Fatalf("process.exit audit entries %v: want one 137 for %s and one 3 for %s", exits, proc, late)
	}
	if res := d.cli(nil, "output", sb.ID, late); res.code != 0 || string(res.stdout) != "late\n" {
		t.Fatalf("output of the command that ended while no daemon ran: exit %d, %q", res.code, res.stdout)
	}
	var hist struct {
		Execs []struct {
			ID       string     `json:"id"`
			Detached bool       `json:"detached"`
			EndedAt  *time.Time `json:"ended_at"`
			ExitCode *int       `json:"exit_code"`
			Error    string     `json:"error"`
		} `json:"execs"`
	}
	d.callJSON("GET", "/v1/sandboxes/"+sb.ID+"/execs", nil, http.StatusOK, &hist)
	ended := map[string]string{}
	for _, e := range hist.Execs {
		switch {
		case e.EndedAt == nil:
			ended[e.ID] = "running"
		case e.ExitCode != nil:
			ended[e.ID] = "exit " + strconv.Itoa(*e.ExitCode)
		default:
			ended[e.ID] = "error " + e.Error
		}
	}
	// The attached command has no entry: the killed daemon never saw it end.
	if len(ended) != 2 || ended[proc] != "exit 137" || ended[late] != "exit 3" {
		t.Fatalf("exec history %v: want %s exit 137, %s exit 3", ended, proc, late)
	}
	// The attached command died with its process group.
	d.expectExec(sb.ID, `{"cmd":["sh","-c","kill -0 $(cat /tmp/attached.pid) 2>/dev/null && echo alive || echo gone"]}`, 0, "gone\n", "")
}
