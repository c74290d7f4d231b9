package e2e

// Issue 12's fork part through a real `agentbox serve` and real TCG
// guests: a timeout set from now reaps the sandbox on time, restore
// --count makes forks with their own identity and fresh randomness (and a
// restore of too many leaves nothing), and --net-rate caps a download and
// an upload.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/agentbox/agentbox/tests/testenv"
)

// wireExpiry is the part of a Sandbox answer about its expiry.
type wireExpiry struct {
	ID        string     `json:"id"`
	ExpiresAt *time.Time `json:"expires_at"`
	Limits    struct {
		TTLSeconds int64 `json:"ttl_seconds"`
	} `json:"limits"`
}

// TestTimeoutReaped: POST .../timeout and `agentbox timeout` set the TTL
// from now (longer, then shorter), inspect shows expires_at, using the
// sandbox does not move it, and the reaper removes it at that time.
func TestTimeoutReaped(t *testing.T) {
	d := startDaemon(t)
	sb := d.create(createBody(t, `"name":"short","memory_mib":256,"limits":{"ttl_seconds":60}`))

	// Longer, through the CLI: it prints the new expiry.
	before := time.Now()
	r := d.cli(nil, "timeout", "short", "2h")
	if r.code != 0 {
		t.Fatalf("agentbox timeout: exit %d, stderr %s", r.code, r.stderr)
	}
	printed, err := time.Parse(time.RFC3339, strings.TrimSpace(string(r.stdout)))
	if err != nil || printed.Before(before.Add(2*time.Hour).Truncate(time.Second)) || printed.After(time.Now().Add(2*time.Hour+time.Second)) {
		t.Fatalf("agentbox timeout printed %q (%v): want about two hours from now", r.stdout, err)
	}
	var v wireExpiry
	d.callJSON("GET", "/v1/sandboxes/short", nil, http.StatusOK, &v)
	if v.ExpiresAt == nil || !v.ExpiresAt.Truncate(time.Second).Equal(printed) {
		t.Fatalf("inspect expires_at %v, want %v", v.ExpiresAt, printed)
	}
	// Shorter, through the API: 6 s from now.
	set := time.Now()
	d.callJSON("POST", "/v1/sandboxes/short/timeout", `{"timeout_seconds":6}`, http.StatusOK, &v)
	exp := *v.ExpiresAt
	if exp.Before(set.Add(6*time.Second).Truncate(time.Second)) || exp.After(time.Now().Add(7*time.Second)) {
		t.Fatalf("expires_at %v after a 6 s timeout set at %v", exp, set)
	}
	// Using it does not extend it.
	d.out("short", "true")
	d.callJSON("GET", "/v1/sandboxes/short", nil, http.StatusOK, &v)
	if !v.ExpiresAt.Equal(exp) {
		t.Fatalf("an exec moved expires_at from %v to %v", exp, v.ExpiresAt)
	}
	// Bad input: nothing changes.
	d.apiError("POST", "/v1/sandboxes/short/timeout", "application/json", []byte(`{"timeout_seconds":0}`), http.StatusBadRequest, "invalid_argument")
	d.apiError("POST", "/v1/sandboxes/nosuch/timeout", "application/json", []byte(`{"timeout_seconds":5}`), http.StatusNotFound, "not_found")

	testenv.WaitFor(t, time.Minute, "the sandbox to be reaped", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		st, _, _, err := d.roundTrip(ctx, "GET", "/v1/sandboxes/"+sb.ID, nil, "")
		return err == nil && st == http.StatusNotFound
	})
	gone := time.Now()
	if gone.Before(exp) {
		t.Fatalf("reaped at %v, before its expiry %v", gone, exp)
	}
	// The reaper checks every second; removing a TCG domain takes a few.
	if late := gone.Sub(exp); late > 45*time.Second { // a bound, not a timing assertion
		t.Errorf("reaped %v after its expiry", late)
	}
	d.assertGone(sb.ID)
	var actions []string
	for _, e := range d.auditEndsWith(sb.ID, "reap") {
		actions = append(actions, e.Action)
		if e.Action == "reap" && e.Args["reason"] != "ttl reached" {
			t.Errorf("reap entry %+v: want reason ttl reached", e)
		}
	}
	if !hasSubsequence(actions, []string{"create", "timeout", "timeout", "exec", "reap"}) {
		t.Errorf("audit actions %v: want create, timeout ×2, exec, reap", actions)
	}
}

// randomWaiter is started before the snapshot: it waits for /run/go and
// then writes 16 bytes of os.urandom, so it draws after the restore.
const randomWaiter = `import os, time
open('/run/waiting', 'w').close()
while not os.path.exists('/run/go'):
    time.sleep(0.05)
with open('/run/rand.tmp', 'w') as f:
    f.write(os.urandom(16).hex())
os.rename('/run/rand.tmp', '/run/rand')
`

// TestRestoreCount: restore --count 4 makes try-1 … try-4 at once, each
// with its own hostname and machine id, and a process started before the
// snapshot draws different random bytes in each. Count 0 is refused by
// the CLI, and a count above the capacity by the daemon (429, before
// anything is made).
func TestRestoreCount(t *testing.T) {
	const mem = 256
	// Room for the source and 4 forks, not for 2 more.
	d := startDaemon(t, "--capacity-memory", strconv.Itoa(5*mem+mem/2), "--capacity-vcpus", "64")
	src := d.create(createBody(t, fmt.Sprintf(`"name":"fsrc","memory_mib":%d`, mem)))
	d.out(src.ID, "sh", "-c", "setsid python3 -c \"$0\" </dev/null >/dev/null 2>&1 &", randomWaiter)
	testenv.WaitFor(t, time.Minute, "the random waiter to run", func() bool {
		return d.exists(src.ID, "/run/waiting")
	})
	srcMachineID := strings.TrimSpace(d.out(src.ID, "sh", "-c", "cat /etc/machine-id 2>/dev/null || true"))
	d.save("fsrc", "forkcp")

	start := time.Now()
	r := d.cli(nil, "restore", "--count", "4", "--name", "try", "forkcp")
	took := time.Since(start)
	if r.code != 0 {
		t.Fatalf("agentbox restore --count 4: exit %d, stderr %s", r.code, r.stderr)
	}
	ids := strings.Fields(string(r.stdout))
	d.Track(ids...)
	if len(ids) != 4 {
		t.Fatalf("restore --count 4 printed %q: want 4 IDs", r.stdout)
	}
	t.Logf("restore --count 4 of a %d MiB guest: %v", mem, took)
	hosts, machineIDs, randoms := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i, id := range ids {
		sb := d.get(id)
		if want := fmt.Sprintf("try-%d", i+1); sb.Name != want || sb.State != "running" {
			t.Errorf("sandbox %d: %+v, want %s running", i+1, sb, want)
		}
		d.out(id, "touch", "/run/go")
		testenv.WaitFor(t, time.Minute, id+"'s random bytes", func() bool { return d.exists(id, "/run/rand") })
		rnd := strings.TrimSpace(d.out(id, "cat", "/run/rand"))
		host := strings.TrimSpace(d.out(id, "hostname"))
		mid := strings.TrimSpace(d.out(id, "sh", "-c", "cat /etc/machine-id 2>/dev/null || true"))
		if len(rnd) != 32 || host != sb.Domain || (srcMachineID != "" && (len(mid) != 32 || mid == srcMachineID)) {
			t.Errorf("%s: random %q, hostname %q (want %s), machine id %q (source %q)", sb.Name, rnd, host, sb.Domain, mid, srcMachineID)
		}
		randoms[rnd], hosts[host] = true, true
		if mid != "" {
			machineIDs[mid] = true
		}
	}
	if len(randoms) != 4 || len(hosts) != 4 || (srcMachineID != "" && len(machineIDs) != 4) {
		t.Errorf("4 forks drew %d distinct random values, have %d distinct hostnames and %d machine ids; want 4 each", len(randoms), len(hosts), len(machineIDs))
	}
	// The audit has one restore per fork.
	for _, id := range ids {
		if es := d.audit(id); len(es) == 0 || es[0].Action != "restore" {
			t.Errorf("audit of %s: %+v, want a restore entry first", id, es)
		}
	}

	// Refused: count 0 (CLI), a count beyond the capacity (429 with the
	// numbers, nothing made), a name too long for the count.
	snap := d.snapshot()
	if r := d.cli(nil, "restore", "--count", "0", "forkcp"); r.code != 125 || !bytes.Contains(r.stderr, []byte("--count 0: want 1 to 64 sandboxes")) {
		t.Errorf("restore --count 0: exit %d, stderr %s", r.code, r.stderr)
	}
	e := d.apiError("POST", "/v1/snapshots/forkcp/restore", "application/json", []byte(`{"name":"more","count":2}`), http.StatusTooManyRequests, "capacity_exceeded")
	if e.Details["count"] != float64(2) || e.Details["requested_memory_mib"] != float64(2*mem) || !strings.Contains(e.Message, "2 sandboxes") {
		t.Errorf("429 %+v: want count 2, %d MiB requested", e, 2*mem)
	}
	d.apiError("POST", "/v1/snapshots/forkcp/restore", "application/json", []byte(`{"name":"`+strings.Repeat("n", 62)+`","count":2}`), http.StatusBadRequest, "invalid_argument")
	if after := d.snapshot(); after != snap {
		t.Errorf("refused restores changed the state:\n%s\nvs\n%s", snap, after)
	}
	for _, id := range ids {
		d.call("DELETE", "/v1/sandboxes/"+id+"?force=true", nil, http.StatusNoContent)
	}
	d.call("DELETE", "/v1/snapshots/forkcp", nil, http.StatusNoContent)
}

// TestNetRate: --net-rate 2M caps a 20 MiB download from a server on this
// host's loopback (host:PORT) at 2 MiB/s (10 s ± 15 %), and an upload of
// 20 MiB is not faster than the cap where inspect says the outbound cap
// is in force (a kernel without tc policing cannot); inspect shows each
// direction with its mechanism; --max-net-rate refuses more (422 with the numbers) and a cap
// without a network is refused.
func TestNetRate(t *testing.T) {
	const size = 20 << 20
	payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, "listen on loopback", err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, n)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(payload)))
		w.Write(payload)
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	port := ln.Addr().(*net.TCPAddr).Port
	n := os.Getpid()%200 + 1
	pool := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 215, byte(n), 0}), 24)
	table := fmt.Sprintf("abxrate%d", os.Getpid())
	t.Cleanup(func() { deleteTable(t, table) })
	d := newDaemon(t, "--network-table", table, "--network-pool", pool.String(), "--max-net-rate", strconv.Itoa(4<<20))
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	netBody := fmt.Sprintf(`"memory_mib":256,"boot_timeout_ms":180000,"network":{"mode":"allowlist","allow":["host:%d"]}`, port)

	// Refused before anything is made.
	snap := d.snapshot()
	e := d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, netBody+`,"net_bps":8388608`)), http.StatusUnprocessableEntity, "invalid_argument")
	if e.Details["ceiling"] != float64(4<<20) || e.Details["requested"] != float64(8<<20) || e.Details["flag"] != "--max-net-rate" {
		t.Errorf("422 details %v", e.Details)
	}
	d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, `"memory_mib":256,"net_bps":2097152`)), http.StatusBadRequest, "invalid_argument")
	if after := d.snapshot(); after != snap {
		t.Errorf("refused creates changed the state:\n%s\nvs\n%s", snap, after)
	}

	r := d.cli(nil, "create", "--image", imageDir(t), "--accel", "tcg", "--name", "capped", "--memory", "256", "--boot-timeout", "180s", "--network", "allowlist", "--allow", "host:"+strconv.Itoa(port), "--net-rate", "2M")
	if r.code != 0 {
		t.Fatalf("agentbox create --net-rate 2M: exit %d, stderr %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(string(r.stdout))
	d.Track(id)
	var v struct {
		Resources struct {
			NetBps      int64 `json:"net_bps"`
			Enforcement []struct {
				Limit, Unit, Enforcement, Detail string
				Value                            int64
			} `json:"enforcement"`
		} `json:"resources"`
	}
	d.callJSON("GET", "/v1/sandboxes/"+id, nil, http.StatusOK, &v)
	enf := map[string]string{}
	for _, e := range v.Resources.Enforcement {
		if e.Limit == "net_rate" || e.Limit == "net_rate_out" {
			enf[e.Limit] = e.Enforcement
			if e.Value != 2<<20 || e.Unit != "bytes/s" {
				t.Errorf("inspect %s: %+v, want 2 MiB/s", e.Limit, e)
			}
		}
	}
	if v.Resources.NetBps != 2<<20 || enf["net_rate"] != "tc" || enf["net_rate_out"] != "nftables" {
		t.Fatalf("inspect resources %+v: want net_bps 2 MiB/s, net_rate enforced by tc, net_rate_out by nftables", v.Resources)
	}
	wantLimit := fmt.Sprintf("limit out-%s: over 2097152 bytes/s burst 209715; first rule of in-%s and fwd-%s: over it, drop", id, id, id)
	if got := outLimitRules(t, table, id); got != wantLimit {
		t.Fatalf("nftables after create:\n%s\nwant\n%s", got, wantLimit)
	}
	// The guest times the transfer itself (no exec overhead in it).
	get := fmt.Sprintf(`import time, urllib.request
t = time.monotonic()
n = len(urllib.request.urlopen("http://host.agentbox.internal:%d/", timeout=120).read())
print(n, time.monotonic() - t)`, port)
	fields := strings.Fields(d.out(id, "python3", "-c", get))
	got, _ := strconv.Atoi(fields[0])
	secs, _ := strconv.ParseFloat(fields[1], 64)
	t.Logf("20 MiB download at --net-rate 2M: %.2f s (%.2f MiB/s)", secs, float64(size)/(1<<20)/secs)
	if got != size || secs < 8.5 || secs > 16 {
		t.Errorf("download of %d bytes took %.2f s; want %d bytes in 10 s: not under 8.5 s (the cap), not over 16 s (a cap far below 2 MiB/s)", got, secs, size)
	}
	// A restarted daemon adopts the sandbox and installs its rules again,
	// the cap with them: the upload runs under the adopted rules.
	d.Kill9()
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if got := outLimitRules(t, table, id); got != wantLimit {
		t.Fatalf("nftables after the daemon restarted:\n%s\nwant\n%s", got, wantLimit)
	}
	post := fmt.Sprintf(`import time, urllib.request
data = b"x" * %d
t = time.monotonic()
n = urllib.request.urlopen(urllib.request.Request("http://host.agentbox.internal:%d/", data=data, method="POST"), timeout=300).read()
print(n.decode(), time.monotonic() - t)`, size, port)
	fields = strings.Fields(d.out(id, "python3", "-c", post))
	got, _ = strconv.Atoi(fields[0])
	secs, _ = strconv.ParseFloat(fields[1], 64)
	t.Logf("20 MiB upload at --net-rate 2M: %.2f s (%.2f MiB/s)", secs, float64(size)/(1<<20)/secs)
	if got != size || secs < 8.5 || secs > 16 {
		t.Errorf("upload of %d bytes took %.2f s; want %d bytes in 10 s: not under 8.5 s (the cap), not over 16 s (a cap far below 2 MiB/s)", got, secs, size)
	}

	// Removed with the sandbox: no limit object, chain or rule of it.
	if r := d.cli(nil, "rm", "--force", id); r.code != 0 {
		t.Fatalf("agentbox rm: exit %d, stderr %s", r.code, r.stderr)
	}
	if got := outLimitRules(t, table, id); got != "" {
		t.Errorf("nftables after rm: %s; want nothing of sandbox %s", got, id)
	}
}

// outLimitRules describes what table holds of sandbox id's outbound cap:
// its limit object and the first rule of each of its chains; "" when
// none of them is there.
func outLimitRules(t *testing.T, table, id string) string {
	t.Helper()
	c, err := nftables.New()
	must(t, "nftables", err)
	tb := &nftables.Table{Family: nftables.TableFamilyINet, Name: table}
	objs, err := c.GetNamedObjects(tb)
	must(t, "list nftables objects", err)
	var parts []string
	for _, o := range objs {
		no, ok := o.(*nftables.NamedObj)
		if !ok || no.Name != "out-"+id {
			continue
		}
		l, _ := no.Obj.(*expr.Limit)
		if no.Type != nftables.ObjTypeLimit || l == nil || l.Type != expr.LimitTypePktBytes || l.Unit != expr.LimitTimeSecond {
			parts = append(parts, fmt.Sprintf("object out-%s of type %d: %#v", id, no.Type, no.Obj))
			continue
		}
		over := "under"
		if l.Over {
			over = "over"
		}
		parts = append(parts, fmt.Sprintf("limit out-%s: %s %d bytes/s burst %d", id, over, l.Rate, l.Burst))
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	must(t, "list nftables chains", err)
	var first []string
	for _, name := range []string{"in-" + id, "fwd-" + id} {
		for _, ch := range chains {
			if ch.Table.Name != table || ch.Name != name {
				continue
			}
			rules, err := c.GetRules(tb, ch)
			must(t, "list nftables rules", err)
			if len(rules) == 0 {
				first = append(first, name+": empty")
				continue
			}
			e := rules[0].Exprs
			ref, _ := e[0].(*expr.Objref)
			v, _ := e[len(e)-1].(*expr.Verdict)
			if len(e) == 2 && ref != nil && ref.Name == "out-"+id && v != nil && v.Kind == expr.VerdictDrop {
				first = append(first, name)
			} else {
				first = append(first, fmt.Sprintf("%s: %#v", name, e))
			}
		}
	}
	if len(first) > 0 {
		parts = append(parts, "first rule of "+strings.Join(first, " and ")+": over it, drop")
	}
	return strings.Join(parts, "; ")
}
