// Command memcharge shows, on the host it runs on, how Linux charges the
// page-cache pages of a file that several memory cgroups map privately
// (MAP_PRIVATE, as a memory template's clones map its guest RAM file with
// share=off) and what a hard limit does to a group that only reads them.
// It makes its own groups under the memory controller (v1 or v2), runs a
// child process in each, prints a Markdown table of each group's charge
// after each step and removes everything it made. Needs root.
//
// Steps (FILE is --size MiB, written and evicted from the page cache
// first, so its pages are faulted in by the steps):
//
//  1. template: a process in group T reads FILE (read(2), as a template's
//     pre-fault would) and exits; T stays.
//  2. clone-a: a process in group A (limit --limit MiB) maps FILE
//     privately, reads every page, writes --dirty MiB of it.
//  3. clone-b: the same in group B.
//  4. T is removed: its charge moves to the parent.
//  5. cold: FILE evicted again; a process in group C (limit --limit MiB,
//     below FILE's size) maps it privately and reads every page: the
//     first toucher pays, up to its limit, then its clean file pages are
//     reclaimed, not OOM-killed.
//  6. hog: a process in group D (limit --limit MiB) writes more than
//     --limit MiB of its private mapping: anonymous memory over the limit
//     is OOM-killed.
//
// Usage: go run ./tests/bench/memcharge [--dir DIR] [--size 256] [--limit 64] [--dirty 16]
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		child(os.Args[2:])
		return
	}
	dir := flag.String("dir", os.TempDir(), "directory for the test file (a disk file system, not tmpfs: tmpfs pages are shmem)")
	sizeMiB := flag.Int("size", 256, "file size, MiB")
	limitMiB := flag.Int("limit", 64, "memory limit of the clone groups, MiB")
	dirtyMiB := flag.Int("dirty", 16, "MiB each clone writes (copy-on-write)")
	flag.Parse()
	if err := run(*dir, *sizeMiB, *limitMiB, *dirtyMiB); err != nil {
		fmt.Fprintln(os.Stderr, "memcharge:", err)
		os.Exit(1)
	}
}

// memcg is one memory cgroup the experiment made.
type memcg struct {
	dir string
	v2  bool
}

// root finds where to make groups: under the memory hierarchy's root.
func root() (string, bool, error) {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "/sys/fs/cgroup", true, nil
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.stat"); err == nil {
		return "/sys/fs/cgroup/memory", false, nil
	}
	return "", false, errors.New("no memory cgroup controller mounted at /sys/fs/cgroup")
}

func (g memcg) write(file, v string) error {
	return os.WriteFile(filepath.Join(g.dir, file), []byte(v), 0)
}

func (g memcg) setLimit(mib int) error {
	b := strconv.Itoa(mib << 20)
	if g.v2 {
		return errors.Join(g.write("memory.max", b), g.write("memory.swap.max", "0"))
	}
	if err := g.write("memory.limit_in_bytes", b); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(g.dir, "memory.memsw.limit_in_bytes")); err == nil {
		return g.write("memory.memsw.limit_in_bytes", b)
	}
	return nil
}

// charge returns the group's charged bytes and its file and anonymous
// parts (v2 memory.current, file, anon; v1 usage_in_bytes, total_cache,
// total_rss), and how many OOM kills it saw (oom_kill in memory.events
// on v2, memory.oom_control on v1).
func (g memcg) charge() (cur, file, anon, ooms int64) {
	ef := "memory.events"
	if !g.v2 {
		ef = "memory.oom_control"
	}
	b, _ := os.ReadFile(filepath.Join(g.dir, ef))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			ooms, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	cf, ff, af := "memory.current", "file", "anon"
	if !g.v2 {
		cf, ff, af = "memory.usage_in_bytes", "total_cache", "total_rss"
	}
	b, _ = os.ReadFile(filepath.Join(g.dir, cf))
	cur, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	b, _ = os.ReadFile(filepath.Join(g.dir, "memory.stat"))
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case ff:
			file = n
		case af:
			anon = n
		}
	}
	return cur, file, anon, ooms
}

// proc is a child process mapping the file in a group.
type proc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// start runs a child in g: it waits until it is in the group, then does
// mode on file and answers "done" (or dies).
func start(g memcg, mode, file string, dirtyMiB int) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "child", mode, file, strconv.Itoa(dirtyMiB))
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, in: in, out: bufio.NewReader(outp)}
	if err := g.write("cgroup.procs", strconv.Itoa(cmd.Process.Pid)); err != nil {
		p.kill()
		return nil, err
	}
	fmt.Fprintln(in, "go")
	return p, nil
}

// wait waits for the child's "done"; an error says how it died.
func (p *proc) wait() error {
	line, err := p.out.ReadString('\n')
	if err == nil && strings.TrimSpace(line) == "done" {
		return nil
	}
	werr := p.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("%s (signal %d)", ws.Signal(), int(ws.Signal()))
		}
	}
	return fmt.Errorf("child ended: %v %v", err, werr)
}

func (p *proc) kill() {
	p.in.Close()
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// child is the mapping process: "read" reads the file with read(2),
// "map" maps it privately, reads every page and writes dirtyMiB,
// "hog" maps it privately and writes all of it.
func child(args []string) {
	mode, file := args[0], args[1]
	dirty, _ := strconv.Atoi(args[2])
	bufio.NewReader(os.Stdin).ReadString('\n') // in the group now
	f, err := os.Open(file)
	if err != nil {
		panic(err)
	}
	st, _ := f.Stat()
	size := int(st.Size())
	switch mode {
	case "read":
		io.Copy(io.Discard, f)
	case "map", "hog":
		m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
		if err != nil {
			panic(err)
		}
		sum := byte(0)
		for i := 0; i < size; i += 4096 {
			sum += m[i]
		}
		if mode == "hog" {
			dirty = size >> 20
		}
		for i := 0; i < dirty<<20 && i < size; i += 4096 {
			m[i] = sum + 1
		}
	}
	fmt.Println("done")
	io.Copy(io.Discard, os.Stdin) // hold the mapping until told to go
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

func run(dir string, sizeMiB, limitMiB, dirtyMiB int) error {
	rootDir, v2, err := root()
	if err != nil {
		return err
	}
	top := memcg{dir: filepath.Join(rootDir, fmt.Sprintf("memcharge-%d", os.Getpid())), v2: v2}
	if err := os.Mkdir(top.dir, 0o755); err != nil {
		return err
	}
	var procs []*proc
	var groups []memcg
	defer func() {
		for _, p := range procs {
			p.kill()
		}
		time.Sleep(100 * time.Millisecond)
		for i := len(groups) - 1; i >= 0; i-- {
			os.Remove(groups[i].dir)
		}
		os.Remove(top.dir)
	}()
	if v2 {
		top.write("cgroup.subtree_control", "+memory")
	} else {
		top.write("memory.use_hierarchy", "1")
	}
	group := func(name string, limit int) (memcg, error) {
		g := memcg{dir: filepath.Join(top.dir, name), v2: v2}
		if err := os.Mkdir(g.dir, 0o755); err != nil {
			return g, err
		}
		groups = append(groups, g)
		if limit > 0 {
			return g, g.setLimit(limit)
		}
		return g, nil
	}
	file := filepath.Join(dir, fmt.Sprintf("memcharge-%d.ram", os.Getpid()))
	defer os.Remove(file)
	if err := writeFile(file, sizeMiB); err != nil {
		return err
	}
	fmt.Printf("memory cgroup v%d, file %d MiB (evicted from the page cache before steps 1 and 5), clone limit %d MiB, each clone writes %d MiB\n\n",
		map[bool]int{true: 2, false: 1}[v2], sizeMiB, limitMiB, dirtyMiB)
	fmt.Printf("| step | result | group | charged MiB | file MiB | anon MiB | OOM kills |\n|---|---|---|---|---|---|---|\n")
	report := func(step, result string, gs ...memcg) {
		for _, g := range gs {
			cur, f, a, o := g.charge()
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %d |\n", step, result, filepath.Base(g.dir), mib(cur), mib(f), mib(a), o)
			step, result = "", ""
		}
	}
	runIn := func(g memcg, mode string, dirty int) string {
		p, err := start(g, mode, file, dirty)
		if err != nil {
			return "start: " + err.Error()
		}
		procs = append(procs, p)
		if err := p.wait(); err != nil {
			return err.Error()
		}
		return "ok"
	}

	t, err := group("T", 0)
	if err != nil {
		return err
	}
	a, err := group("A", limitMiB)
	if err != nil {
		return err
	}
	b, err := group("B", limitMiB)
	if err != nil {
		return err
	}
	report("1. template reads the file", runIn(t, "read", 0), t)
	report("2. clone-a maps privately, reads all, writes "+strconv.Itoa(dirtyMiB)+" MiB", runIn(a, "map", dirtyMiB), t, a)
	report("3. clone-b the same", runIn(b, "map", dirtyMiB), t, a, b)
	procs[0].kill() // the template's reader has exited already; remove its group
	procs = procs[1:]
	if err := os.Remove(t.dir); err != nil {
		return fmt.Errorf("remove T: %w", err)
	}
	groups = groups[1:]
	time.Sleep(200 * time.Millisecond)
	report("4. T removed (charge moves to the parent)", "ok", top, a, b)
	for _, p := range procs {
		p.kill()
	}
	procs = nil
	if err := evict(file); err != nil {
		return err
	}
	c, err := group("C", limitMiB)
	if err != nil {
		return err
	}
	report("5. cold: C maps the evicted file, reads all "+strconv.Itoa(sizeMiB)+" MiB", runIn(c, "map", 0), c)
	d, err := group("D", limitMiB)
	if err != nil {
		return err
	}
	report("6. hog: D writes all "+strconv.Itoa(sizeMiB)+" MiB privately", runIn(d, "hog", 0), d)
	return nil
}

// writeFile writes a file of n MiB of non-zero data, syncs it and evicts
// it from the page cache.
func writeFile(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for i := 0; i < n; i++ {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return evict(path)
}

// evict writes the file back and drops its pages from the page cache.
func evict(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
