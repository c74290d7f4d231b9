package e2e

// Resource limits end to end: a real TCG guest under `agentbox serve`
// with a disk cap, a CPU quota, a memory hard limit and a pids limit; a
// memory hog, a fork bomb, a disk filled to ENOSPC and a CPU busy loop
// inside it; ceilings refused before anything is made; the usage monitor
// and its act threshold.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

type (
	wireEnforcement struct {
		Limit       string `json:"limit"`
		Value       int64  `json:"value"`
		Unit        string `json:"unit"`
		Enforcement string `json:"enforcement"`
		Detail      string `json:"detail"`
	}
	wireUsage struct {
		SampledAt        time.Time `json:"sampled_at"`
		DomainState      string    `json:"domain_state"`
		CPUTimeNs        uint64    `json:"cpu_time_ns"`
		MemoryRSSBytes   uint64    `json:"memory_rss_bytes"`
		MemoryLimitBytes uint64    `json:"memory_limit_bytes"`
		DiskBytes        uint64    `json:"disk_bytes"`
		DiskCapBytes     uint64    `json:"disk_cap_bytes"`
		NetRxBytes       uint64    `json:"net_rx_bytes"`
		NetTxBytes       uint64    `json:"net_tx_bytes"`
		Pids             int64     `json:"pids"`
		PidsMax          int64     `json:"pids_max"`
		Memory           *struct {
			PSSBytes        uint64 `json:"pss_bytes"`
			PrivateBytes    uint64 `json:"private_bytes"`
			SharedBytes     uint64 `json:"shared_bytes"`
			AnonBytes       uint64 `json:"anon_bytes"`
			CgroupBytes     int64  `json:"cgroup_bytes"`
			CgroupAnonBytes int64  `json:"cgroup_anon_bytes"`
			CgroupFileBytes int64  `json:"cgroup_file_bytes"`
		} `json:"memory"`
	}
	wireResourceSandbox struct {
		ID        string `json:"id"`
		State     string `json:"state"`
		Reason    string `json:"reason"`
		Domain    string `json:"domain"`
		MemoryMiB int    `json:"memory_mib"`
		Resources *struct {
			DiskMiB            int64             `json:"disk_mib"`
			CPUQuotaPercent    int               `json:"cpu_quota_percent"`
			MemoryHardLimitMiB int64             `json:"memory_hard_limit_mib"`
			Pids               int64             `json:"pids"`
			Enforcement        []wireEnforcement `json:"enforcement"`
		} `json:"resources"`
		Usage *wireUsage `json:"usage"`
	}
)

// getResources returns GET /v1/sandboxes/{id} with its resources and usage.
func (d *daemon) getResources(id string) wireResourceSandbox {
	d.t.Helper()
	var sb wireResourceSandbox
	d.callJSON("GET", "/v1/sandboxes/"+id, nil, http.StatusOK, &sb)
	return sb
}

// enforcement returns the enforcement entry of limit, failing without one.
func (sb wireResourceSandbox) enforcement(t *testing.T, limit string) wireEnforcement {
	t.Helper()
	if sb.Resources == nil {
		t.Fatalf("sandbox %s has no resources", sb.ID)
	}
	for _, e := range sb.Resources.Enforcement {
		if e.Limit == limit {
			return e
		}
	}
	t.Fatalf("sandbox %s: no enforcement entry for %s in %+v", sb.ID, limit, sb.Resources.Enforcement)
	return wireEnforcement{}
}

// imageDiskMiB is the test image's disk size in MiB (its qcow2 virtual size).
const imageDiskMiB = 2048

// qemuPID reads the QEMU pid libvirt recorded for domain.
func qemuPID(t *testing.T, domain string) int {
	t.Helper()
	b, err := os.ReadFile("/run/libvirt/qemu/" + domain + ".pid")
	if err != nil {
		t.Fatalf("QEMU pid of %s: %v", domain, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// cpuTicks is utime+stime of pid in clock ticks (100 Hz), from
// /proc/PID/stat.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

// cgroupLine returns the path of controller in /proc/PID/cgroup.
func cgroupLine(t *testing.T, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[1] == controller || (controller == "" && parts[1] == "" && parts[0] == "0")) {
			return parts[2]
		}
	}
	return ""
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// sh is the JSON of an exec request running script with sh -c.
func sh(script string, timeoutMs int) string {
	b, _ := json.Marshal(map[string]any{"cmd": []string{"sh", "-c", script}, "timeout_ms": timeoutMs})
	return string(b)
}

func TestResourcesCeilings(t *testing.T) {
	d := startDaemon(t, "--max-memory", "1024", "--max-disk", "3072", "--max-cpu-quota", "100", "--max-vcpus", "2", "--max-pids", "512")
	for _, tc := range []struct {
		extra, msg string
	}{
		{`"memory_mib":8192`, "memory 8192 MiB is above the daemon's ceiling of 1024 MiB (--max-memory)"},
		{`"disk_mib":4096`, "disk 4096 MiB is above the daemon's ceiling of 3072 MiB (--max-disk)"},
		{`"cpu_quota_percent":150`, "cpu quota 150% is above the daemon's ceiling of 100% (--max-cpu-quota)"},
		{`"vcpus":4`, "vcpus 4 is above the daemon's ceiling of 2 (--max-vcpus)"},
		{`"pids":1000`, "pids 1000 is above the daemon's ceiling of 512 (--max-pids)"},
	} {
		e := d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, tc.extra)), http.StatusUnprocessableEntity, "invalid_argument")
		if !strings.Contains(e.Message, tc.msg) {
			t.Errorf("create with %s: message %q, want it to contain %q", tc.extra, e.Message, tc.msg)
		}
		if e.Details["ceiling"] == nil || e.Details["requested"] == nil {
			t.Errorf("create with %s: details %v lack requested/ceiling", tc.extra, e.Details)
		}
	}
	// Below what a guest needs to boot: refused (400) with the minimum,
	// before anything is made.
	for _, tc := range []struct{ extra, msg string }{
		{`"memory_mib":100`, "memory 100 MiB is below the minimum of 256 MiB a guest needs"},
		{`"io_bps":10`, "io throughput cap 10 bytes/s is below the minimum of 1048576 bytes/s (1 MiB/s)"},
		{`"iops":1`, "io operations cap 1 ops/s is below the minimum of"},
		{`"pids":20`, "pids 20: QEMU needs at least 32 host tasks"},
	} {
		e := d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, tc.extra)), http.StatusBadRequest, "invalid_argument")
		if !strings.Contains(e.Message, tc.msg) {
			t.Errorf("create with %s: message %q, want it to contain %q", tc.extra, e.Message, tc.msg)
		}
	}
	// The CLI's flags reach the same check.
	r := d.cli(nil, "create", "--image", testenv.Image(t), "--accel", "tcg", "--memory", "2048", "--disk", "2048")
	if r.code == 0 || !strings.Contains(string(r.stderr), "memory 2048 MiB is above the daemon's ceiling of 1024 MiB (--max-memory)") {
		t.Errorf("agentbox create --memory 2048: exit %d, stderr %q", r.code, r.stderr)
	}
	// A disk below the image's: refused with both numbers.
	e := d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, `"disk_mib":1000`)), http.StatusBadRequest, "invalid_argument")
	if want := "disk 1000 MiB is smaller than the image's disk of 2048 MiB (2147483648 bytes)"; !strings.Contains(e.Message, want) {
		t.Errorf("small disk: message %q, want it to contain %q", e.Message, want)
	}
	if sbs := d.list(""); len(sbs) != 0 {
		t.Errorf("refused creates left sandboxes: %v", ids(sbs))
	}
	if left, _ := os.ReadDir(filepath.Join(d.State, "sandboxes")); len(left) != 0 {
		t.Errorf("refused creates left sandbox dirs: %d", len(left))
	}
}

// TestResourcesGuest runs one guest through every limit.
func TestResourcesGuest(t *testing.T) {
	d := startDaemon(t, "--usage-interval", "1s")
	const diskMiB = imageDiskMiB + 256
	sb := d.create(createBody(t, fmt.Sprintf(`"memory_mib":512,"disk_mib":%d,"cpu_quota_percent":50,"pids":200,"io_bps":104857600,"iops":20000`, diskMiB)))
	pid := qemuPID(t, sb.Domain)
	rs := d.getResources(sb.ID)

	t.Run("enforcement", func(t *testing.T) {
		if e := rs.enforcement(t, "disk"); e.Value != diskMiB || e.Enforcement != "qemu" {
			t.Errorf("disk: %+v", e)
		}
		if e := rs.enforcement(t, "cpu_quota"); e.Value != 50 || e.Enforcement != "libvirt" {
			t.Errorf("cpu_quota: %+v", e)
		}
		for _, l := range []string{"io_bps", "iops", "tcg_cache"} {
			if e := rs.enforcement(t, l); e.Enforcement != "libvirt" {
				t.Errorf("%s: %+v", l, e)
			}
		}
		// 8/5 of (guest RAM + 160 MiB + the 256 MiB TCG cache), rounded up.
		const hardMiB = ((512+160+256)*8 + 4) / 5
		mem := rs.enforcement(t, "memory_hard_limit")
		if mem.Value != hardMiB || rs.Resources.MemoryHardLimitMiB != hardMiB {
			t.Errorf("memory_hard_limit: %+v, resources %d", mem, rs.Resources.MemoryHardLimitMiB)
		}
		switch mem.Enforcement {
		case "cgroup": // this host: libvirt cannot raise the memlock rlimit
			if got := readTrim(t, mem.Detail); got != strconv.Itoa(hardMiB<<20) {
				t.Errorf("%s = %s, want %d", mem.Detail, got, hardMiB<<20)
			}
			if !strings.Contains(mem.Detail, cgroupLine(t, pid, "memory")) && !strings.Contains(mem.Detail, cgroupLine(t, pid, "")) {
				t.Errorf("memory limit %s is not on the QEMU process's cgroup", mem.Detail)
			}
		case "libvirt":
		default:
			t.Errorf("memory_hard_limit: %+v", mem)
		}
		// pids.max is on the cgroup the QEMU process is in, and reads back.
		pe := rs.enforcement(t, "pids")
		if pe.Enforcement != "cgroup" || pe.Value != 200 {
			t.Fatalf("pids: %+v", pe)
		}
		if got := readTrim(t, pe.Detail); got != "200" {
			t.Errorf("%s = %s, want 200", pe.Detail, got)
		}
		cg := cgroupLine(t, pid, "pids")
		if cg == "" || cg == "/" || !strings.HasSuffix(filepath.Dir(pe.Detail), cg) {
			t.Errorf("pids.max %s is not the QEMU process's pids cgroup %q", pe.Detail, cg)
		}
	})

	t.Run("usage", func(t *testing.T) {
		deadline := time.Now().Add(30 * time.Second)
		for rs.Usage == nil && time.Now().Before(deadline) {
			time.Sleep(time.Second)
			rs = d.getResources(sb.ID)
		}
		u := rs.Usage
		if u == nil {
			t.Fatal("no usage sample after 30 s with --usage-interval 1s")
		}
		if u.DomainState != "running" || u.CPUTimeNs == 0 || u.MemoryRSSBytes < 64<<20 || u.MemoryRSSBytes > u.MemoryLimitBytes ||
			u.MemoryLimitBytes != uint64(rs.Resources.MemoryHardLimitMiB)<<20 || u.DiskBytes == 0 || u.DiskBytes > u.DiskCapBytes ||
			u.DiskCapBytes != diskMiB<<20 || u.Pids <= 0 || u.Pids > 200 || u.PidsMax != 200 || u.NetRxBytes != 0 || u.NetTxBytes != 0 {
			t.Errorf("usage not sane: %+v", *u)
		}
		// agentbox inspect shows the limits' enforcement and the usage.
		r := d.cli(nil, "inspect", sb.ID)
		for _, want := range []string{`"limit": "pids"`, `"enforcement": "cgroup"`, `"enforcement": "libvirt"`, `"memory_rss_bytes"`} {
			if r.code != 0 || !strings.Contains(string(r.stdout), want) {
				t.Errorf("agentbox inspect: exit %d, output lacks %s:\n%s", r.code, want, r.stdout)
			}
		}
		// Prometheus gauges per sandbox.
		body, _ := d.call("GET", "/metrics", nil, http.StatusOK)
		for _, name := range []string{"agentbox_sandbox_memory_rss_bytes", "agentbox_sandbox_cpu_seconds", "agentbox_sandbox_disk_bytes", "agentbox_sandbox_host_tasks"} {
			if !strings.Contains(string(body), name+`{sandbox="`+sb.ID+`"}`) {
				t.Errorf("/metrics lacks %s for %s", name, sb.ID)
			}
		}
	})

	t.Run("memory split", func(t *testing.T) {
		// A booted guest's RAM is anonymous memory only its QEMU maps;
		// what QEMU shares with other processes is its code and libraries.
		// PSS lies between the private memory and the resident memory, and
		// the memory cgroup is charged at least the anonymous memory's
		// bulk and at most the hard limit.
		deadline := time.Now().Add(30 * time.Second)
		for (rs.Usage == nil || rs.Usage.Memory == nil) && time.Now().Before(deadline) {
			time.Sleep(time.Second)
			rs = d.getResources(sb.ID)
		}
		if rs.Usage == nil || rs.Usage.Memory == nil {
			t.Fatal("no memory split in the usage after 30 s with --usage-interval 1s")
		}
		m, limit := *rs.Usage.Memory, int64(rs.Usage.MemoryLimitBytes)
		t.Logf("memory of a booted 512 MiB TCG guest: pss %d MiB, private %d MiB, shared %d MiB, anon %d MiB, cgroup %d MiB (anon %d, file %d)",
			m.PSSBytes>>20, m.PrivateBytes>>20, m.SharedBytes>>20, m.AnonBytes>>20, m.CgroupBytes>>20, m.CgroupAnonBytes>>20, m.CgroupFileBytes>>20)
		if m.AnonBytes < 64<<20 || m.PrivateBytes < m.AnonBytes || m.SharedBytes >= m.PrivateBytes ||
			m.PSSBytes < m.PrivateBytes || m.PSSBytes > m.PrivateBytes+m.SharedBytes || m.PSSBytes > uint64(limit) {
			t.Errorf("smaps figures not sane: %+v (limit %d)", m, limit)
		}
		if m.CgroupBytes <= 0 || m.CgroupBytes > limit || m.CgroupAnonBytes < int64(m.AnonBytes)/2 || m.CgroupAnonBytes+m.CgroupFileBytes > m.CgroupBytes {
			t.Errorf("cgroup figures not sane: %+v (limit %d)", m, limit)
		}
		r := d.cli(nil, "inspect", sb.ID)
		for _, want := range []string{`"pss_bytes"`, `"private_bytes"`, `"shared_bytes"`, `"cgroup_file_bytes"`} {
			if r.code != 0 || !strings.Contains(string(r.stdout), want) {
				t.Errorf("agentbox inspect: exit %d, output lacks %s:\n%s", r.code, want, r.stdout)
			}
		}
		body, _ := d.call("GET", "/metrics", nil, http.StatusOK)
		for _, name := range []string{"agentbox_sandbox_memory_pss_bytes", "agentbox_sandbox_memory_private_bytes", "agentbox_sandbox_memory_shared_bytes"} {
			if !strings.Contains(string(body), name+`{sandbox="`+sb.ID+`"}`) {
				t.Errorf("/metrics lacks %s for %s", name, sb.ID)
			}
		}
	})

	t.Run("cpu quota", func(t *testing.T) {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.mustExec(sb.ID, sh("timeout 20 sh -c 'touch /tmp/busy; while :; do :; done'; true", 60000))
		}()
		testenv.WaitFor(t, time.Minute, "the guest's busy loop to start", func() bool {
			r, err := d.exec(sb.ID, sh("test -e /tmp/busy", 30000))
			return err == nil && r.exit != nil && r.exit.ExitCode == 0
		})
		t0, c0 := time.Now(), cpuTicks(t, pid)
		time.Sleep(10 * time.Second)
		t1, c1 := time.Now(), cpuTicks(t, pid)
		wg.Wait()
		share := float64(c1-c0) / 100 / t1.Sub(t0).Seconds()
		t.Logf("QEMU CPU under a 50%% quota with a guest busy loop: %.1f%% of one host CPU", share*100)
		// The cap is the upper bound; the lower one only shows the loop
		// ran (other guests on a loaded host can leave QEMU below 50%).
		if share < 0.2 || share > 0.65 {
			t.Errorf("QEMU used %.1f%% of one host CPU over %.1f s, want at most 50%% + 15%% (and 20%% at least: the loop ran)", share*100, t1.Sub(t0).Seconds())
		}
	})

	t.Run("disk full", func(t *testing.T) {
		// The root file system grew to the disk.
		r := d.mustExec(sb.ID, sh("df -k / | tail -n 1", 30000))
		f := strings.Fields(string(r.stdout))
		if len(f) < 4 {
			t.Fatalf("df: %q", r.stdout)
		}
		totalKiB, _ := strconv.ParseInt(f[1], 10, 64)
		if totalKiB <= imageDiskMiB<<10 || totalKiB > diskMiB<<10 {
			t.Fatalf("root file system is %d KiB, want above the image's %d MiB and at most the disk's %d MiB", totalKiB, imageDiskMiB, diskMiB)
		}
		// Fill all but 128 MiB without writing (unwritten extents), then
		// write until ENOSPC.
		r = d.mustExec(sb.ID, sh(`a=$(df -k / | tail -n 1 | awk '{print $4}'); fallocate -l $(( (a - 131072) * 1024 )) /fill1 && dd if=/dev/zero of=/fill2 bs=1M; echo "dd=$?"; sync`, 120000))
		if !strings.Contains(string(r.stderr), "No space left on device") || !strings.Contains(string(r.stdout), "dd=1") {
			t.Fatalf("dd until full: stdout %q stderr %q, want ENOSPC", r.stdout, r.stderr)
		}
		st, err := os.Stat(filepath.Join(d.State, "sandboxes", sb.ID, "overlay.qcow2"))
		if err != nil {
			t.Fatal(err)
		}
		// The overlay holds at most the disk's data plus qcow2 metadata
		// (L2 tables and refcounts, well under 1%).
		if limit := int64(diskMiB<<20) + int64(diskMiB<<20)/100; st.Size() > limit {
			t.Errorf("overlay is %d bytes, above the disk cap %d + metadata", st.Size(), int64(diskMiB)<<20)
		}
		t.Logf("overlay after the fill: %d bytes (cap %d)", st.Size(), int64(diskMiB)<<20)
		d.expectExec(sb.ID, sh("rm /fill1 /fill2 && echo freed", 30000), 0, "freed\n", "")
	})

	t.Run("memory hog", func(t *testing.T) {
		// tail keeps a line without a newline in memory: it grows until the
		// guest's OOM killer (commands' cgroup) kills it.
		r := d.mustExec(sb.ID, sh("head -c 1000m /dev/zero | tail -n 1 >/dev/null; echo status=$?", 120000))
		if string(r.stdout) != "status=137\n" {
			t.Fatalf("memory hog: stdout %q stderr %q, want it killed (137)", r.stdout, r.stderr)
		}
		d.expectExec(sb.ID, sh("dmesg | grep -c 'Memory cgroup out of memory: Killed process [0-9]* (tail)'", 30000), 0, "1\n", "")
		if got := d.getResources(sb.ID); got.State != "running" {
			t.Fatalf("sandbox after the hog: %s (%s)", got.State, got.Reason)
		}
		if rss := rssBytes(t, pid); rss > ((512+160+256)*8+4)/5<<20 {
			t.Errorf("QEMU RSS %d above its hard limit", rss)
		}
	})

	t.Run("fork bomb", func(t *testing.T) {
		var p wireProcess
		d.callJSON("POST", "/v1/sandboxes/"+sb.ID+"/processes", sh("f() { f | f & }; f; sleep 1000", 0), http.StatusCreated, &p)
		// The bomb reaches the commands cgroup's pids.max: its shells
		// print "Cannot fork" (read from the agent's buffer of its output).
		var out []byte
		for deadline := time.Now().Add(3 * time.Minute); !strings.Contains(string(out), "Cannot fork") && time.Now().Before(deadline); {
			time.Sleep(2 * time.Second)
			out = nil
			body, _ := d.call("GET", "/v1/sandboxes/"+sb.ID+"/processes/"+p.ID+"/output?offset=0", nil, http.StatusOK)
			for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
				var ev wireEvent
				if json.Unmarshal([]byte(line), &ev) == nil {
					out = append(out, ev.Data...)
				}
			}
		}
		if !strings.Contains(string(out), "Cannot fork") {
			t.Fatalf("the fork bomb never hit pids.max within 3 minutes; its output: %.500q", out)
		}
		// The agent answers while the bomb runs (a stat is served by the
		// agent itself, no fork).
		start := time.Now()
		for range 3 {
			d.call("GET", "/v1/sandboxes/"+sb.ID+"/files/stat?path=/etc/hostname", nil, http.StatusOK)
		}
		t.Logf("fork bomb: the agent answered 3 stats in %s", time.Since(start).Round(time.Millisecond))
		// End it (SIGKILL to its process group); exec works after, and the
		// commands cgroup refused forks at its pids.max meanwhile.
		d.call("POST", "/v1/sandboxes/"+sb.ID+"/processes/"+p.ID+"/kill", `{"signal":"KILL"}`, http.StatusNoContent)
		var r execResult
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); {
			const cg = "/sys/fs/cgroup/agentbox.commands/"
			r = d.mustExec(sb.ID, `{"cmd":["cat","`+cg+`pids.current","`+cg+`pids.max","`+cg+`pids.events"],"timeout_ms":60000}`)
			if f := strings.Fields(string(r.stdout)); len(f) == 4 && f[0] == "1" {
				break
			}
			time.Sleep(time.Second)
		}
		f := strings.Fields(string(r.stdout))
		if len(f) != 4 || f[0] != "1" || f[2] != "max" {
			t.Fatalf("commands cgroup after the kill: %q %q (want 1 task: the cat)", r.stdout, r.stderr)
		}
		if refused, _ := strconv.Atoi(f[3]); refused == 0 {
			t.Errorf("pids.events max = 0: the bomb never reached pids.max %s", f[1])
		} else {
			t.Logf("fork bomb: %d forks refused at pids.max %s", refused, f[1])
		}
		d.expectExec(sb.ID, sh("echo alive", 60000), 0, "alive\n", "")
		if got := d.getResources(sb.ID); got.State != "running" {
			t.Fatalf("sandbox after the fork bomb: %s (%s)", got.State, got.Reason)
		}
		// The host side never exceeded the QEMU process's own limit.
		if n := len(taskIDs(t, pid)); n > 200 {
			t.Errorf("QEMU has %d tasks, above pids.max 200", n)
		}
	})

	t.Run("paused", func(t *testing.T) {
		// A paused domain (here by hand; QEMU's werror=enospc pause on a
		// full host disk looks the same with reason ioerror) is reported.
		virsh := func(verb string) {
			if out, err := exec.Command("virsh", "-c", testenv.URI(), verb, sb.Domain).CombinedOutput(); err != nil {
				t.Fatalf("virsh %s: %v %s", verb, err, out)
			}
		}
		virsh("suspend")
		var u *wireUsage
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			if u = d.getResources(sb.ID).Usage; u != nil && u.DomainState == "paused" {
				break
			}
		}
		if u == nil || u.DomainState != "paused" {
			t.Fatalf("usage of a suspended domain: %+v", u)
		}
		// The sample that shows the pause is published before the check
		// under the sandbox's lock that writes the entry.
		testenv.WaitFor(t, 30*time.Second, "an audit entry for the pause", func() bool {
			body, _ := d.call("GET", "/v1/sandboxes/"+sb.ID+"/audit", nil, http.StatusOK)
			return strings.Contains(string(body), `"the domain is paused (user)"`)
		})
		virsh("resume")
		// A pause agentbox makes is no warning, however many samples
		// (one a second) it lasts.
		d.call("POST", "/v1/sandboxes/"+sb.ID+"/pause", []byte(`{}`), http.StatusOK)
		time.Sleep(3 * time.Second)
		d.call("POST", "/v1/sandboxes/"+sb.ID+"/resume", nil, http.StatusOK)
		body, _ := d.call("GET", "/v1/sandboxes/"+sb.ID+"/audit", nil, http.StatusOK)
		if n := strings.Count(string(body), `"the domain is paused (user)"`); n != 1 {
			t.Errorf("%d audit entries for a paused domain, want 1 (the suspend behind agentbox's back):\n%s", n, body)
		}
	})

	// Removing the sandbox removes the pids cgroup agentbox made for it.
	pidsDir := filepath.Dir(rs.enforcement(t, "pids").Detail)
	d.call("DELETE", "/v1/sandboxes/"+sb.ID+"?force=true", nil, http.StatusNoContent)
	if _, err := os.Stat(pidsDir); !os.IsNotExist(err) {
		t.Errorf("pids cgroup %s left after the sandbox was removed: %v", pidsDir, err)
	}
}

func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	for _, line := range strings.Split(readTrim(t, fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for %d", pid)
	return 0
}

func taskIDs(t *testing.T, pid int) []os.DirEntry {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	return ents
}

// TestResourcesActThreshold: a sandbox whose QEMU memory use passes the
// act threshold is stopped with the numbers in its reason, after a
// warning in the audit log.
func TestResourcesActThreshold(t *testing.T) {
	d := startDaemon(t, "--usage-interval", "1s", "--warn-percent", "1", "--act-percent", "5")
	sb := d.create(createBody(t, ""))
	deadline := time.Now().Add(60 * time.Second)
	var got wireResourceSandbox
	for time.Now().Before(deadline) {
		if got = d.getResources(sb.ID); got.State == "stopped" {
			break
		}
		time.Sleep(time.Second)
	}
	if got.State != "stopped" || !strings.Contains(got.Reason, "QEMU resident memory") || !strings.Contains(got.Reason, "MiB limit") {
		t.Fatalf("sandbox %s (%s), want stopped with a reason naming the memory numbers", got.State, got.Reason)
	}
	var entries []wireAudit
	body, _ := d.call("GET", "/v1/sandboxes/"+sb.ID+"/audit", nil, http.StatusOK)
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var e wireAudit
		if json.Unmarshal([]byte(line), &e) == nil {
			entries = append(entries, e)
		}
	}
	var actions []string
	for _, e := range entries {
		if e.Action == "resource" {
			actions = append(actions, fmt.Sprint(e.Args["action"]))
		}
	}
	if !hasSubsequence(actions, []string{"warn", "stop"}) {
		t.Errorf("resource audit actions %v, want a warn then a stop (entries %+v)", actions, entries)
	}
}

// TestResourcesRestored: a sandbox restored from a snapshot has its
// source's limits in force and records each with its enforcement, the
// domain XML's (CPU quota, I/O caps, TCG cache) as well as the cgroups'.
// Warm and pooled sandboxes take the same path (prepareRestoring; see
// vmctl/sandbox's TestRestoredEnforcementFake).
func TestResourcesRestored(t *testing.T) {
	d := startDaemon(t)
	src := d.create(createBody(t, `"memory_mib":256,"cpu_quota_percent":50,"io_bps":52428800`))
	d.save(src.ID, "res1")
	fork := d.restore("res1", `{}`)
	type entry struct {
		limit, unit, enforcement string
		value                    int64
	}
	entries := func(sb wireResourceSandbox) map[string]entry {
		m := map[string]entry{}
		for _, e := range sb.Resources.Enforcement {
			m[e.Limit] = entry{e.Limit, e.Unit, e.Enforcement, e.Value}
		}
		return m
	}
	want, got := entries(d.getResources(src.ID)), entries(d.getResources(fork.ID))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("restored sandbox's enforcement %v; want its source's %v", got, want)
	}
	for limit, value := range map[string]int64{"cpu_quota": 50, "io_bps": 52428800, "tcg_cache": 256} {
		if e := got[limit]; e.enforcement != "libvirt" || e.value != value {
			t.Errorf("restored sandbox: %s %+v, want %d enforced by libvirt", limit, e, value)
		}
	}
	for _, limit := range []string{"disk", "memory_hard_limit", "pids"} {
		if e, ok := got[limit]; !ok || strings.HasPrefix(e.enforcement, "not enforced") {
			t.Errorf("restored sandbox: %s %+v, want it enforced", limit, e)
		}
	}
	xml, err := exec.Command("virsh", "-c", testenv.URI(), "dumpxml", fork.Domain).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh dumpxml %s: %v %s", fork.Domain, err, xml)
	}
	for _, el := range []string{"<global_quota>50000</global_quota>", "<total_bytes_sec>52428800</total_bytes_sec>"} {
		if !strings.Contains(string(xml), el) {
			t.Errorf("restored domain's XML lacks %s", el)
		}
	}
	d.call("DELETE", "/v1/snapshots/res1", nil, http.StatusNoContent)
}
