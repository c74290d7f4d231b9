package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// wirePaused is what the lifecycle tests read of a sandbox.
type wirePaused struct {
	State  string `json:"state"`
	Reason string `json:"reason"`
	Paused *struct {
		ToDisk       bool   `json:"to_disk"`
		File         string `json:"file"`
		Tag          string `json:"tag"`
		VMStateBytes int64  `json:"vmstate_bytes"`
		DiskBytes    int64  `json:"disk_bytes"`
	} `json:"paused"`
	Limits struct {
		IdleAction       string `json:"idle_action"`
		PausedTTLSeconds int64  `json:"paused_ttl_seconds"`
	} `json:"limits"`
}

func (d *daemon) paused(ref string) wirePaused {
	d.t.Helper()
	var p wirePaused
	d.callJSON("GET", "/v1/sandboxes/"+ref, nil, http.StatusOK, &p)
	return p
}

// pauseCounter is counterScript of vmctl/sandbox's pause test: a python3
// process out of the agent's process group counting in memory into
// /tmp/count, its pid in /tmp/count.pid.
const pauseCounter = `setsid python3 -c '
import os, time
n = 0
while True:
    n += 1
    open("/tmp/count.tmp", "w").write(str(n))
    os.replace("/tmp/count.tmp", "/tmp/count")
    time.sleep(0.05)
' </dev/null >/dev/null 2>&1 &
echo $! > /tmp/count.pid
while [ ! -s /tmp/count ]; do sleep 0.05; done`

// counter returns the count and the counting process's pid (it must
// live).
func (d *daemon) counter(ref string) (int, string) {
	d.t.Helper()
	f := strings.Fields(d.out(ref, "sh", "-c", "cat /tmp/count; echo; cat /tmp/count.pid; kill -0 $(cat /tmp/count.pid) && echo alive"))
	if len(f) != 3 || f[2] != "alive" {
		d.t.Fatalf("counter of %s: %q", ref, f)
	}
	n, _ := strconv.Atoi(f[0])
	return n, f[1]
}

// TestDaemonPauseToDisk: through the CLI and the API, a sandbox with a
// network paused to disk survives a kill -9 of the daemon, resumes in
// place (same ID, name, tap, address, MAC) with its counting process
// going on and its network working; the wrong-state errors say what to
// do; a stop and start keep a file.
func TestDaemonPauseToDisk(t *testing.T) {
	n := os.Getpid()%200 + 1
	pool := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 215, byte(n), 0}), 24)
	table := fmt.Sprintf("abxpause%d", os.Getpid())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, "listen on loopback", err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the host") }))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	port := ln.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { deleteTable(t, table) }) // after the daemon's cleanup
	d := newDaemon(t, "--network-table", table, "--network-pool", pool.String())
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	sb := d.create(createBody(t, fmt.Sprintf(`"name":"hib","memory_mib":256,"boot_timeout_ms":180000,"network":{"mode":"allowlist","allow":["host:%d"]}`, port)))
	fetch := []string{"python3", "-c", fmt.Sprintf(`import urllib.request; print(urllib.request.urlopen("http://host.agentbox.internal:%d/", timeout=30).read().decode())`, port)}
	if got := strings.TrimSpace(d.out(sb.ID, fetch...)); got != "hello from the host" {
		t.Fatalf("fetch from the host gave %q", got)
	}
	d.out(sb.ID, "sh", "-c", pauseCounter)
	net0 := d.network(sb.ID)
	n0, pid := d.counter(sb.ID)

	// In memory, through the CLI.
	if r := d.cli(nil, "pause", "hib"); r.code != 0 || string(r.stdout) != "hib\n" {
		t.Fatalf("agentbox pause: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if p := d.paused("hib"); p.State != "paused" || p.Paused == nil || p.Paused.ToDisk {
		t.Fatalf("after pause: %+v", p)
	}
	e := d.apiError("POST", "/v1/sandboxes/hib/exec", "application/json", []byte(`{"cmd":["true"]}`), http.StatusConflict, "sandbox_not_running")
	if !strings.Contains(e.Message, "resume it first: agentbox resume hib") || !strings.Contains(e.Message, "?resume=true") {
		t.Errorf("exec on a paused sandbox: %q; want the hint", e.Message)
	}
	d.apiError("GET", "/v1/sandboxes/hib/files/stat?path=/etc", "", nil, http.StatusConflict, "sandbox_not_running")
	if r := d.cli(nil, "resume", "hib"); r.code != 0 {
		t.Fatalf("agentbox resume: exit %d, %s", r.code, r.stderr)
	}
	if r := d.cli(nil, "resume", "hib"); r.code != 125 || !strings.Contains(string(r.stderr), "not paused") {
		t.Errorf("resume of a running sandbox: exit %d, %s; want 125 saying it is not paused", r.code, r.stderr)
	}
	if r := d.cli(nil, "start", "hib"); r.code != 125 || !strings.Contains(string(r.stderr), "running already") {
		t.Errorf("start of a running sandbox: exit %d, %s; want 125 saying it runs", r.code, r.stderr)
	}

	// To disk, then the daemon killed and started again.
	n1, _ := d.counter(sb.ID)
	if n1 <= n0 {
		t.Fatalf("counter %d after the pause in memory, %d before", n1, n0)
	}
	if r := d.cli(nil, "pause", "--to-disk", "hib"); r.code != 0 {
		t.Fatalf("agentbox pause --to-disk: exit %d, %s", r.code, r.stderr)
	}
	p := d.paused("hib")
	if p.State != "paused" || p.Paused == nil || !p.Paused.ToDisk || p.Paused.VMStateBytes <= 0 || p.Paused.DiskBytes <= 0 || !strings.HasSuffix(p.Paused.File, "/overlay.qcow2") {
		t.Fatalf("after pause --to-disk: %+v", p)
	}
	if slices.Contains(testenv.Domains(t), sb.Domain) {
		t.Fatalf("domain %s still exists while paused to disk", sb.Domain)
	}
	d.kill9()
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	if p := d.paused("hib"); p.State != "paused" || p.Paused == nil || !p.Paused.ToDisk {
		t.Fatalf("after the daemon's restart: %+v, want paused to disk", p)
	}
	var after wireSandbox
	d.callJSON("POST", "/v1/sandboxes/hib/resume", nil, http.StatusOK, &after)
	if after.ID != sb.ID || after.Name != "hib" || after.State != "running" {
		t.Fatalf("resumed: %+v", after)
	}
	if net1 := d.network(sb.ID); net1.Tap != net0.Tap || net1.Address != net0.Address || net1.MAC != net0.MAC {
		t.Errorf("network after resume %+v, before %+v: want the same tap, address, MAC", net1, net0)
	}
	n2, pid2 := d.counter(sb.ID)
	if pid2 != pid || n2 < n1 {
		t.Fatalf("counter after resume from disk: %d (pid %s); before %d (pid %s)", n2, pid2, n1, pid)
	}
	waitFor(t, 30*time.Second, "the counter to go on", func() bool { k, _ := d.counter(sb.ID); return k > n2 })
	if got := strings.TrimSpace(d.out(sb.ID, fetch...)); got != "hello from the host" {
		t.Fatalf("after resume from disk: fetch from the host gave %q", got)
	}

	// Stop, then start: the file stays, the process does not.
	d.out(sb.ID, "sh", "-c", "echo kept > /root/kept && sync")
	d.call("POST", "/v1/sandboxes/hib/stop", nil, http.StatusOK)
	e = d.apiError("POST", "/v1/sandboxes/hib/pause", "application/json", []byte(`{}`), http.StatusConflict, "conflict")
	if !strings.Contains(e.Message, "start it again") {
		t.Errorf("pause of a stopped sandbox: %q", e.Message)
	}
	if r := d.cli(nil, "start", "hib"); r.code != 0 {
		t.Fatalf("agentbox start: exit %d, %s", r.code, r.stderr)
	}
	if got := d.out(sb.ID, "sh", "-c", "cat /root/kept; if kill -0 $(cat /tmp/count.pid); then echo counting; fi 2>/dev/null"); got != "kept\n" {
		t.Errorf("after start: %q, want the file and no counter", got)
	}
	if got := strings.TrimSpace(d.out(sb.ID, fetch...)); got != "hello from the host" {
		t.Errorf("after start: fetch from the host gave %q", got)
	}
	var acts []string
	for _, e := range d.audit(sb.ID) {
		if e.Action == "pause" || e.Action == "resume" || e.Action == "start" {
			acts = append(acts, e.Action+":"+e.Error)
		}
	}
	// The refused calls are audited with their error code.
	if want := "pause: resume: resume:conflict start:conflict pause: resume: pause:conflict start:"; strings.Join(acts, " ") != want {
		t.Errorf("audit actions %q, want %q", acts, want)
	}
}

// TestDaemonIdlePauseToDisk: an idle timeout with idle_action
// pause-to-disk pauses the sandbox to disk instead of removing it; an
// exec with ?resume=true resumes it and runs; a bad idle action is
// refused.
func TestDaemonIdlePauseToDisk(t *testing.T) {
	d := startDaemon(t)
	d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, `"limits":{"idle_action":"sleep"}`)), http.StatusBadRequest, "invalid_argument")
	r := d.cli(nil, "create", "--image", imageDir(t), "--accel", "tcg", "--boot-timeout", "180s", "--name", "idler", "--memory", "256",
		"--idle-timeout", "3s", "--idle-action", "pause-to-disk", "--paused-ttl", "1h")
	if r.code != 0 {
		t.Fatalf("create: exit %d, %s", r.code, r.stderr)
	}
	d.track(strings.TrimSpace(string(r.stdout)))
	if p := d.paused("idler"); p.Limits.IdleAction != "pause-to-disk" || p.Limits.PausedTTLSeconds != 3600 {
		t.Fatalf("limits %+v", p.Limits)
	}
	var p wirePaused
	waitFor(t, 2*time.Minute, "the idle sandbox to be paused to disk", func() bool {
		p = d.paused("idler")
		return p.State == "paused"
	})
	if p.Paused == nil || !p.Paused.ToDisk {
		t.Fatalf("idle sandbox: %+v, want paused to disk", p)
	}
	body, _ := d.call("POST", "/v1/sandboxes/idler/exec?resume=true", `{"cmd":["echo","awake"]}`, http.StatusOK)
	// "awake\n" in base64, then the exit.
	if !strings.Contains(string(body), `"type":"stdout","data":"YXdha2UK"`) || !strings.Contains(string(body), `"exit":{"exit_code":0`) {
		t.Fatalf("exec ?resume=true answered %s", body)
	}
	if p := d.paused("idler"); p.State != "running" {
		t.Fatalf("after exec ?resume=true: %+v", p)
	}
	var reap map[string]any
	for _, e := range d.audit("idler") {
		if e.Action == "reap" {
			reap = e.Args
		}
	}
	if reap["action"] != "pause-to-disk" || reap["reason"] != "idle timeout reached" {
		t.Errorf("reap audit args %v", reap)
	}
}
