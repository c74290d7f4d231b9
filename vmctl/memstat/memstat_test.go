package memstat

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A clone of a 512 MiB memory template (smaps_rollup of its QEMU as
// Linux 6.x prints it; numbers shaped like the measurement).
const cloneRollup = `55f1c0a00000-7ffd5c3f7000 ---p 00000000 00:00 0                          [rollup]
Rss:              262144 kB
Pss:               69632 kB
Pss_Dirty:         40960 kB
Pss_Anon:          40960 kB
Pss_File:          28672 kB
Pss_Shmem:             0 kB
Shared_Clean:     215040 kB
Shared_Dirty:          0 kB
Private_Clean:      6144 kB
Private_Dirty:     40960 kB
Referenced:       262144 kB
Anonymous:         40960 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                 12 kB
SwapPss:              12 kB
Locked:                0 kB
`

func TestParseRollup(t *testing.T) {
	r, err := ParseRollup(strings.NewReader(cloneRollup))
	if err != nil {
		t.Fatal(err)
	}
	want := Rollup{
		Rss: 262144 << 10, Pss: 69632 << 10, PssAnon: 40960 << 10, PssFile: 28672 << 10,
		SharedClean: 215040 << 10, PrivateClean: 6144 << 10, PrivateDirty: 40960 << 10,
		Anonymous: 40960 << 10, Swap: 12 << 10,
	}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
	if r.Private() != 47104<<10 || r.Shared() != 215040<<10 {
		t.Fatalf("private %d shared %d", r.Private(), r.Shared())
	}
	// Every resident page is either private or shared.
	if r.Private()+r.Shared() != r.Rss {
		t.Fatalf("private+shared %d != rss %d", r.Private()+r.Shared(), r.Rss)
	}
}

// An old kernel's rollup (4.14: no Pss_Anon/File/Shmem) parses with those
// zero.
func TestParseRollupOldKernel(t *testing.T) {
	r, err := ParseRollup(strings.NewReader("00400000-7fff ---p 00000000 00:00 0 [rollup]\nRss: 100 kB\nPss: 50 kB\nShared_Clean: 60 kB\nPrivate_Dirty: 40 kB\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r != (Rollup{Rss: 100 << 10, Pss: 50 << 10, SharedClean: 60 << 10, PrivateDirty: 40 << 10}) {
		t.Fatalf("got %+v", r)
	}
}

func TestParseRollupBad(t *testing.T) {
	for name, in := range map[string]string{
		"empty":         "",
		"no pss":        "Rss: 1 kB\n",
		"unit":          "Rss: 1 MB\nPss: 1 kB\n",
		"number":        "Rss: x kB\nPss: 1 kB\n",
		"negative":      "Rss: -1 kB\nPss: 1 kB\n",
		"missing value": "Rss: kB\nPss: 1 kB\n",
		"overflow":      "Rss: 99999999999999999999 kB\nPss: 1 kB\n",
	} {
		if _, err := ParseRollup(strings.NewReader(in)); err == nil || !strings.HasPrefix(err.Error(), "smaps_rollup: ") {
			t.Errorf("%s: err %v, want a smaps_rollup error", name, err)
		}
	}
}

func TestRead(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "42"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "42", "smaps_rollup"), []byte(cloneRollup), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Read(proc, 42)
	if err != nil || r.Pss != 69632<<10 {
		t.Fatalf("Read: %+v, %v", r, err)
	}
	if _, err := Read(proc, 43); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing process: %v, want fs.ErrNotExist", err)
	}
}

// The test process's own rollup: the real kernel's format parses, and
// its numbers hang together.
func TestReadSelf(t *testing.T) {
	r, err := Read("", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if r.Rss == 0 || r.Pss == 0 || r.Pss > r.Rss || r.Private()+r.Shared() != r.Rss || r.Anonymous == 0 {
		t.Fatalf("implausible rollup of this process: %+v", r)
	}
}
