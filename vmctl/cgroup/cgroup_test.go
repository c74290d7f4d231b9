package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Seen on a cgroup v1 hybrid host, libvirt 9.0 without systemd.
const hybridCgroup = `9:name=systemd:/
8:pids:/
7:blkio:/machine/qemu-1-agentbox-x.libvirt-qemu
6:freezer:/machine/qemu-1-agentbox-x.libvirt-qemu
5:devices:/
4:memory:/machine/qemu-1-agentbox-x.libvirt-qemu
3:cpuset:/machine/qemu-1-agentbox-x.libvirt-qemu/emulator
2:cpuacct:/
1:cpu:/machine/qemu-1-agentbox-x.libvirt-qemu/emulator
0::/machine/qemu-1-agentbox-x.libvirt-qemu/emulator
`

// libvirt on a systemd host with cgroup v2.
const unifiedCgroup = `0::/machine.slice/machine-qemu\x2d1\x2dagentbox\x2dx.scope/libvirt/emulator
`

func fakeProc(t *testing.T, pid, content string) string {
	t.Helper()
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, pid, "cgroup"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return proc
}

func touch(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParse(t *testing.T) {
	m, err := Parse(strings.NewReader(hybridCgroup))
	if err != nil {
		t.Fatal(err)
	}
	for c, want := range map[string]string{
		"pids": "/", "memory": "/machine/qemu-1-agentbox-x.libvirt-qemu", "name=systemd": "/",
		"cpu": "/machine/qemu-1-agentbox-x.libvirt-qemu/emulator", "": "/machine/qemu-1-agentbox-x.libvirt-qemu/emulator",
	} {
		if m[c] != want {
			t.Errorf("%q = %q, want %q", c, m[c], want)
		}
	}
	m, err = Parse(strings.NewReader("4:cpu,cpuacct:/a\n"))
	if err != nil || m["cpu"] != "/a" || m["cpuacct"] != "/a" {
		t.Errorf("combined controllers: %v %v", m, err)
	}
	if _, err := Parse(strings.NewReader("garbage\n")); err == nil {
		t.Error("Parse accepted a malformed line")
	}
}

func TestDomainPath(t *testing.T) {
	for in, want := range map[string]string{
		"/machine/qemu-1-a.libvirt-qemu/emulator":  "/machine/qemu-1-a.libvirt-qemu",
		"/machine/qemu-1-a.libvirt-qemu/vcpu12":    "/machine/qemu-1-a.libvirt-qemu",
		"/machine/qemu-1-a.libvirt-qemu/iothread1": "/machine/qemu-1-a.libvirt-qemu",
		"/machine/qemu-1-a.libvirt-qemu":           "/machine/qemu-1-a.libvirt-qemu",
		"/machine.slice/m.scope/libvirt/emulator":  "/machine.slice/m.scope/libvirt",
		"/": "/",
	} {
		if got := DomainPath(in); got != want {
			t.Errorf("DomainPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestV1Limits(t *testing.T) {
	root := t.TempDir()
	dom := "machine/qemu-1-agentbox-x.libvirt-qemu"
	touch(t, filepath.Join(root, "memory", dom, "memory.limit_in_bytes"), "9223372036854771712\n")
	touch(t, filepath.Join(root, "memory", dom, "memory.memsw.limit_in_bytes"), "9223372036854771712\n")
	touch(t, filepath.Join(root, "memory", dom, "memory.usage_in_bytes"), "1000\n")
	touch(t, filepath.Join(root, "pids", "pids.max"), "max\n") // the root group only
	no := false
	g, err := Of(42, Options{Root: root, Proc: fakeProc(t, "42", hybridCgroup), Unified: &no})
	if err != nil {
		t.Fatal(err)
	}
	if g.Unified() {
		t.Fatal("hybrid host reported as unified")
	}
	if s := g.Stats(); s.MemoryBytes != 1000 || s.MemoryAnonBytes != -1 || s.MemoryFileBytes != -1 || s.MemoryMaxBytes != -1 || s.Pids != -1 {
		t.Errorf("Stats before limits = %+v", s)
	}
	// v1 memory.stat: the hierarchical totals win over the group's own.
	touch(t, filepath.Join(root, "memory", dom, "memory.stat"), "cache 100\nrss 200\nmapped_file 50\ntotal_cache 300\ntotal_rss 400\n")
	if s := g.Stats(); s.MemoryAnonBytes != 400 || s.MemoryFileBytes != 300 {
		t.Errorf("Stats with memory.stat = %+v, want anon 400 file 300", s)
	}
	file, err := g.SetMemoryMax(768 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "memory", dom, "memory.limit_in_bytes"); file != want {
		t.Errorf("memory file %s, want %s", file, want)
	}
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
		if got := read(t, filepath.Join(root, "memory", dom, f)); got != "805306368" {
			t.Errorf("%s = %q", f, got)
		}
	}

	// libvirt left pids out: the group is made at the memory group's path
	// and the process moved in. (The kernel gives a real group its
	// pids.max; the fake gets it after the first call.)
	pidsDir := filepath.Join(root, "pids", dom)
	if _, err := g.SetPidsMax(64); !errors.Is(err, ErrUnsupported) {
		// The fake group has no pids.max (the kernel would make it).
		t.Fatalf("SetPidsMax on a fake group without pids.max: %v", err)
	}
	if got := read(t, filepath.Join(pidsDir, "cgroup.procs")); got != "42" {
		t.Errorf("cgroup.procs = %q, want the pid", got)
	}
	touch(t, filepath.Join(pidsDir, "pids.max"), "max\n")
	touch(t, filepath.Join(pidsDir, "pids.current"), "5\n")
	if file, err = g.SetPidsMax(64); err != nil {
		t.Fatal(err)
	}
	if file != filepath.Join(pidsDir, "pids.max") || read(t, file) != "64" {
		t.Errorf("pids.max file %s = %q", file, read(t, file))
	}
	if s := g.Stats(); s.Pids != 5 || s.PidsMax != 64 || s.MemoryMaxBytes != 768<<20 {
		t.Errorf("Stats = %+v", s)
	}
	if made := g.Made(); len(made) != 1 || made[0] != pidsDir {
		t.Errorf("Made = %v, want [%s]", made, pidsDir)
	}
	// Remove deletes only what it made; a fake dir with files is "busy".
	if err := g.Remove(); err == nil {
		t.Error("Remove of a non-empty group succeeded")
	}
	for _, f := range []string{"pids.max", "pids.current", "cgroup.procs"} {
		os.Remove(filepath.Join(pidsDir, f))
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pidsDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pids group still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "memory", dom)); err != nil {
		t.Errorf("libvirt's memory group was touched: %v", err)
	}
}

func TestV2Limits(t *testing.T) {
	root := t.TempDir()
	dom := filepath.Join(root, `machine.slice/machine-qemu\x2d1\x2dagentbox\x2dx.scope/libvirt`)
	touch(t, filepath.Join(dom, "memory.max"), "max\n")
	touch(t, filepath.Join(dom, "memory.current"), "2048\n")
	touch(t, filepath.Join(dom, "memory.stat"), "anon 1024\nfile 768\nkernel 256\nfile_mapped 512\n")
	touch(t, filepath.Join(dom, "pids.max"), "max\n")
	touch(t, filepath.Join(dom, "pids.current"), "7\n")
	yes := true
	g, err := Of(7, Options{Root: root, Proc: fakeProc(t, "7", unifiedCgroup), Unified: &yes})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := g.SetMemoryMax(1 << 30); err != nil || f != filepath.Join(dom, "memory.max") || read(t, f) != "1073741824" {
		t.Fatalf("SetMemoryMax: %s %v", f, err)
	}
	if f, err := g.SetPidsMax(128); err != nil || f != filepath.Join(dom, "pids.max") || read(t, f) != "128" {
		t.Fatalf("SetPidsMax: %s %v", f, err)
	}
	if s := g.Stats(); s != (Stats{MemoryBytes: 2048, MemoryAnonBytes: 1024, MemoryFileBytes: 768, MemoryMaxBytes: 1 << 30, Pids: 7, PidsMax: 128}) {
		t.Errorf("Stats = %+v", s)
	}
	if len(g.Made()) != 0 {
		t.Errorf("v2 made groups: %v", g.Made())
	}

	// Without the pids controller enabled there is no pids.max.
	os.Remove(filepath.Join(dom, "pids.max"))
	if _, err := g.SetPidsMax(128); !errors.Is(err, ErrUnsupported) {
		t.Errorf("SetPidsMax without the controller: %v", err)
	}
}

func TestOfMissingProcess(t *testing.T) {
	if _, err := Of(99, Options{Root: t.TempDir(), Proc: t.TempDir()}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Of(missing) = %v", err)
	}
}
