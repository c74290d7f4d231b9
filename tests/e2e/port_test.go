package e2e

// Port forwarding over the guest agent's channel: a `python3 -m
// http.server` in a sandbox with network none, reached from the host
// through `agentbox port`.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// wirePort is a port forward in the API.
type wirePort struct {
	GuestPort   int    `json:"guest_port"`
	HostAddr    string `json:"host_addr"`
	Open        bool   `json:"open"`
	Error       string `json:"error"`
	Connections int64  `json:"connections"`
	Active      int64  `json:"active"`
	Failed      int64  `json:"failed"`
	BytesIn     int64  `json:"bytes_in"`
	BytesOut    int64  `json:"bytes_out"`
	LastError   string `json:"last_error"`
}

// ports returns GET /v1/sandboxes/{ref}/ports.
func (d *daemon) ports(ref string) []wirePort {
	d.t.Helper()
	var list struct {
		Ports []wirePort `json:"ports"`
	}
	d.callJSON("GET", "/v1/sandboxes/"+ref+"/ports", nil, http.StatusOK, &list)
	return list.Ports
}

// upload PUTs data to the guest path p.
func (d *daemon) upload(ref, p string, data []byte) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	put, _ := http.NewRequestWithContext(ctx, "PUT", "http://agentbox/v1/sandboxes/"+ref+"/files?parents=true&path="+p, bytes.NewReader(data))
	put.Header.Set("Content-Type", "application/octet-stream")
	resp, err := d.HTTP.Do(put)
	if err != nil {
		d.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		d.t.Fatalf("PUT %s: %d %s", p, resp.StatusCode, body)
	}
}

// httpServer starts `python3 -m http.server PORT` serving /srv in the
// sandbox as a detached process, bound to bind.
func (d *daemon) httpServer(ref string, port int, bind string) {
	d.t.Helper()
	req, _ := json.Marshal(map[string]any{"cmd": []string{"python3", "-m", "http.server", strconv.Itoa(port), "--bind", bind, "--directory", "/srv"}})
	var p wireProcess
	d.callJSON("POST", "/v1/sandboxes/"+ref+"/processes", string(req), http.StatusCreated, &p)
}

// fetch GETs url and returns the body's sha256 and size and the time.
func fetch(url string) (sum string, n int64, took time.Duration, err error) {
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Minute}
	start := time.Now()
	resp, err := cl.Get(url)
	if err != nil {
		return "", 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", 0, 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	h := sha256.New()
	n, err = io.Copy(h, resp.Body)
	return hex.EncodeToString(h.Sum(nil)), n, time.Since(start), err
}

// waitServed waits until url answers 200 (the guest's server started).
func waitServed(t *testing.T, url string) {
	t.Helper()
	testenv.WaitFor(t, 2*time.Minute, "the guest's HTTP server at "+url, func() bool {
		_, _, _, err := fetch(url)
		return err == nil
	})
}

// expectReset checks that a connection to addr is reset (at connect or at
// the first read) without a byte: what a client of a forward to a port
// nobody listens on sees.
func expectReset(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("dial %s: %v; want a reset", addr, err)
		}
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read from %s: %d bytes, %v; want a reset", addr, n, err)
	}
}

// goroutines reads go_goroutines from the daemon's /metrics.
func (d *daemon) goroutines() int {
	d.t.Helper()
	body, _ := d.call("GET", "/metrics", nil, http.StatusOK)
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	d.t.Fatal("no go_goroutines in /metrics")
	return 0
}

var portLine = regexp.MustCompile(`^(127\.0\.0\.1:(\d+)) → guest :(\d+)\n$`)

// TestPortForward: `agentbox port` reaches an HTTP server in a sandbox
// with network none: 50 MiB byte for byte, 20 concurrent connections; bad
// input and a guest port nobody listens on are clear errors that leave
// nothing behind; a daemon killed with kill -9 re-opens the forward at
// the same address; rm closes it. With AGENTBOX_NET_BENCH=1 it also
// measures the same download through --network open, side by side.
func TestPortForward(t *testing.T) {
	bench := os.Getenv("AGENTBOX_NET_BENCH") != ""
	var flags []string
	if bench {
		n := os.Getpid()%200 + 1
		pool := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 213, byte(n), 0}), 24)
		table := fmt.Sprintf("abxport%d", os.Getpid())
		flags = []string{"--network-table", table, "--network-pool", pool.String()}
		if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil {
			t.Cleanup(func() { os.WriteFile("/proc/sys/net/ipv4/ip_forward", b, 0) })
		}
		t.Cleanup(func() { deleteTable(t, table) }) // after the daemon's cleanup
	}
	d := startDaemon(t, flags...)
	sb := d.create(createBody(t, `"name":"web","memory_mib":512`))
	if nw := d.network(sb.ID); nw.Mode != "none" {
		t.Fatalf("network %+v, want none", nw)
	}
	d.expectExec(sb.ID, `{"cmd":["ls","/sys/class/net"]}`, 0, "lo\n", "")
	big := randomBytes(50 << 20)
	small := randomBytes(256 << 10)
	d.upload(sb.ID, "/srv/big.bin", big)
	d.upload(sb.ID, "/srv/small.bin", small)
	d.httpServer(sb.ID, 8000, "127.0.0.1")

	r := d.cli(nil, "port", "web", "8000")
	m := portLine.FindStringSubmatch(string(r.stdout))
	if r.code != 0 || m == nil || m[3] != "8000" || len(r.stderr) != 0 {
		t.Fatalf("agentbox port web 8000: exit %d, stdout %q, stderr %q; want `127.0.0.1:PORT → guest :8000`", r.code, r.stdout, r.stderr)
	}
	addr := m[1]
	waitServed(t, "http://"+addr+"/small.bin") // refused (failed) until the server listens
	failed := d.ports(sb.ID)[0].Failed

	sum, n, took, err := fetch("http://" + addr + "/big.bin")
	if err != nil || n != int64(len(big)) || sum != sha(big) {
		t.Fatalf("50 MiB through the forward: %d bytes, sha256 %s, %v; want %d bytes, %s", n, sum, err, len(big), sha(big))
	}
	t.Logf("50 MiB through the forward (network none): %.2f s, %.1f MiB/s", took.Seconds(), float64(n)/took.Seconds()/(1<<20))

	// 20 concurrent connections, each its own download.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sum, n, _, err := fetch("http://" + addr + "/small.bin")
			if err == nil && (n != int64(len(small)) || sum != sha(small)) {
				err = fmt.Errorf("%d bytes, sha256 %s; want %d, %s", n, sum, len(small), sha(small))
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent download: %v", err)
	}
	var ps []wirePort
	testenv.WaitFor(t, 30*time.Second, "the forward's connections to end", func() bool {
		ps = d.ports(sb.ID)
		return len(ps) == 1 && ps[0].Active == 0
	})
	if p := ps[0]; p.GuestPort != 8000 || p.HostAddr != addr || !p.Open || p.Failed != failed || p.Connections < 22 ||
		p.BytesOut < int64(len(big)+20*len(small)) {
		t.Errorf("forward %+v: want guest 8000 at %s, open, ≥ 22 connections, no more failed than the %d before the server listened, ≥ %d bytes out",
			p, addr, failed, len(big)+20*len(small))
	}
	var inspect []struct {
		Ports []wirePort `json:"ports"`
	}
	if r := d.cli(nil, "inspect", "web"); r.code != 0 || json.Unmarshal(r.stdout, &inspect) != nil || len(inspect) != 1 ||
		len(inspect[0].Ports) != 1 || inspect[0].Ports[0].HostAddr != addr {
		t.Errorf("inspect: exit %d, %s; want the forward at %s", r.code, r.stdout, addr)
	}

	// Bad input: clear errors, nothing opened.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"port", "web", "8000"}, "guest port 8000 of sandbox " + sb.ID + " is forwarded already, at " + addr},
		{[]string{"port", "--publish", addr, "web", "8001"}, addr + " is already in use on this host"},
		{[]string{"port", "web", "0"}, "guest port \"0\" is not a TCP port"},
		{[]string{"port", "web", "65536"}, "guest port \"65536\" is not a TCP port"},
		{[]string{"port", "--publish", "localhost:8080", "web", "8001"}, "host_addr \"localhost:8080\": want IP:PORT"},
		{[]string{"port", "rm", "web", "8002"}, "sandbox " + sb.ID + " has no forward of guest port 8002"},
	} {
		r := d.cli(nil, tc.args...)
		if r.code != 125 || len(r.stdout) != 0 || !strings.Contains(string(r.stderr), tc.want) {
			t.Errorf("agentbox %v: exit %d, stdout %q, stderr %q; want 125 and %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	d.apiError("POST", "/v1/sandboxes/web/ports", "application/json", []byte(`{"guest_port":8001,"host_addr":"`+addr+`"}`), http.StatusConflict, "conflict")
	d.apiError("POST", "/v1/sandboxes/web/ports", "application/json", []byte(`{"guest_port":0}`), http.StatusBadRequest, "invalid_argument")
	d.apiError("DELETE", "/v1/sandboxes/web/ports/http", "", nil, http.StatusBadRequest, "invalid_argument")
	if ps := d.ports(sb.ID); len(ps) != 1 {
		t.Errorf("refused forwards left %d forwards, want 1: %+v", len(ps), ps)
	}

	// A guest port nobody listens on: every client is reset, and nothing
	// stays in the daemon.
	r = d.cli(nil, "port", "web", "9")
	m9 := portLine.FindStringSubmatch(string(r.stdout))
	if r.code != 0 || m9 == nil || m9[3] != "9" {
		t.Fatalf("agentbox port web 9: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	before := d.goroutines()
	for i := 0; i < 20; i++ {
		expectReset(t, m9[1])
	}
	testenv.WaitFor(t, 30*time.Second, "20 failed connections", func() bool {
		ps := d.ports(sb.ID) // by guest port: 9, 8000
		return len(ps) == 2 && ps[0].Failed == 20 && ps[0].Active == 0
	})
	if p := d.ports(sb.ID)[0]; p.Connections != 20 || !strings.HasPrefix(p.LastError, "connect to guest port 9: connection refused: nothing listens on 127.0.0.1:9 or [::1]:9 in the guest") {
		t.Errorf("forward of guest port 9: %+v; want 20 connections failed with connection refused", p)
	}
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("the daemon's goroutines back to %d", before), func() bool { return d.goroutines() <= before })
	if r := d.cli(nil, "port", "ls", "web"); r.code != 0 || !strings.Contains(string(r.stdout), "connection refused") {
		t.Errorf("port ls: exit %d, stdout %q; want the last error", r.code, r.stdout)
	}
	expect(t, d.cli(nil, "port", "rm", "web", "9"), 0, "9\n", "")
	expect(t, d.cli(nil, "port", "ls", "-q", "web"), 0, "8000\n", "")
	if _, err := net.DialTimeout("tcp", m9[1], 5*time.Second); err == nil {
		t.Errorf("the removed forward's address %s still accepts", m9[1])
	}

	// A daemon killed with kill -9 re-opens the forward at the same
	// address. (Its detached processes ended with its agent session: the
	// server starts again.)
	d.Kill9()
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if ps := d.ports(sb.ID); len(ps) != 1 || ps[0].HostAddr != addr || !ps[0].Open {
		t.Fatalf("after a restart: %+v; want the forward at %s, open", ps, addr)
	}
	d.httpServer(sb.ID, 8000, "127.0.0.1")
	waitServed(t, "http://"+addr+"/small.bin")
	if sum, n, _, err := fetch("http://" + addr + "/small.bin"); err != nil || sum != sha(small) {
		t.Errorf("through the re-opened forward: %d bytes, %s, %v", n, sum, err)
	}

	if bench {
		open := d.create(createBody(t, `"name":"webopen","memory_mib":512,"boot_timeout_ms":180000,"network":{"mode":"open"}`))
		d.upload(open.ID, "/srv/big.bin", big)
		d.httpServer(open.ID, 8000, "0.0.0.0")
		gaddr := strings.Split(d.network(open.ID).Address, "/")[0]
		url := "http://" + gaddr + ":8000/big.bin"
		waitServed(t, "http://"+gaddr+":8000/")
		for _, tc := range []struct{ what, url string }{
			{"port forward (network none), over the agent channel", "http://" + addr + "/big.bin"},
			{"network open, the guest's address through its tap", url},
		} {
			sum, n, took, err := fetch(tc.url)
			if err != nil || sum != sha(big) {
				t.Fatalf("bench %s: %d bytes, %s, %v", tc.what, n, sum, err)
			}
			t.Logf("bench: 50 MiB, %s: %.2f s, %.1f MiB/s", tc.what, took.Seconds(), float64(n)/took.Seconds()/(1<<20))
		}
	}

	// rm closes it: the address refuses, the audit has its life.
	expect(t, d.cli(nil, "rm", "-f", "web"), 0, "web\n", "")
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Errorf("the forward's address %s still accepts after rm", addr)
	}
	var acts []string
	for _, e := range d.audit(sb.ID) {
		if strings.HasPrefix(e.Action, "port.") {
			acts = append(acts, fmt.Sprintf("%s %v %v", e.Action, e.Args["guest_port"], e.Args["reason"]))
		}
	}
	// Refused opens are audited too (not those refused before the
	// daemon: a bad port or address); rm -f stops, then removes.
	want := []string{"port.open 8000 <nil>", "port.open 8000 <nil>", "port.open 8001 <nil>", "port.open 8001 <nil>",
		"port.open 9 <nil>", "port.close 9 removed", "port.open 8000 <nil>", "port.close 8000 sandbox "}
	if len(acts) != len(want) || strings.Join(acts[:len(acts)-1], "|") != strings.Join(want[:len(want)-1], "|") ||
		!strings.HasPrefix(acts[len(acts)-1], want[len(want)-1]) {
		t.Errorf("port audit entries:\n%s\nwant:\n%s", strings.Join(acts, "\n"), strings.Join(want, "\n"))
	}
}
