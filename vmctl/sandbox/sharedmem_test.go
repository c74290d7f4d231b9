package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// sharedSandbox is a running sandbox of memMiB guest RAM, a clone of
// template tpl sharing sharedMiB of it ("" : not a clone).
func sharedSandbox(id string, memMiB int, tpl string, sharedMiB int) *Sandbox {
	sb := linked(&Sandbox{ID: id, VCPUs: 1, Memory: memMiB, rec: Record{ID: id, State: StateRunning}})
	if tpl != "" {
		sb.Shared = &SharedMemory{Template: tpl, MiB: sharedMiB}
	}
	return sb
}

func TestMemoryCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		sbs  []*Sandbox
		want int
	}{
		{"booted sandboxes count their guest RAM", []*Sandbox{sharedSandbox("a", 512, "", 0), sharedSandbox("b", 1024, "", 0)}, 1536},
		// Four clones of one 512 MiB template whose RAM file holds
		// 128 MiB: 4 × 384 private + 128 once.
		{"clones of one template", []*Sandbox{sharedSandbox("a", 512, "t1", 128), sharedSandbox("b", 512, "t1", 128), sharedSandbox("c", 512, "t1", 128), sharedSandbox("d", 512, "t1", 128)}, 4*384 + 128},
		{"two templates each once", []*Sandbox{sharedSandbox("a", 512, "t1", 128), sharedSandbox("b", 512, "t2", 200), sharedSandbox("c", 512, "t2", 200)}, 384 + 128 + 2*312 + 200},
		{"mixed", []*Sandbox{sharedSandbox("a", 512, "", 0), sharedSandbox("b", 512, "t1", 128)}, 512 + 384 + 128},
		{"shared larger than RAM counts as RAM", []*Sandbox{sharedSandbox("a", 512, "t1", 4096), sharedSandbox("b", 512, "t1", 4096)}, 512},
		{"negative shared counts as none", []*Sandbox{sharedSandbox("a", 512, "t1", -5)}, 512},
		{"no template name: not shared", []*Sandbox{sharedSandbox("a", 512, "", 0), {ID: "b", Memory: 512, Shared: &SharedMemory{MiB: 256}}}, 1024},
	} {
		if got := memoryCommit(tc.sbs); got != tc.want {
			t.Errorf("%s: %d MiB, want %d", tc.name, got, tc.want)
		}
	}
}

// Admission through register: the first clone of a template commits its
// whole guest RAM, later ones only their private part; a booted sandbox
// always its whole RAM. A sandbox that ended holds nothing.
func TestAdmissionCountsSharedOnce(t *testing.T) {
	m := linkedManager(&Manager{byID: map[string]*Sandbox{}, names: map[string]string{}})
	const capacity = 1500
	var asked []Resources
	admit := func(r Resources) error {
		asked = append(asked, r)
		if r.UsedMemoryMiB+r.MemoryMiB-r.SharedMiB > capacity {
			return errors.New("capacity")
		}
		return nil
	}
	for i, id := range []string{"c1", "c2", "c3", "c4"} {
		if err := m.register(sharedSandbox(id, 512, "t1", 384), admit); err != nil {
			t.Fatalf("clone %d refused: %v (asked %+v)", i+1, err, asked[len(asked)-1])
		}
	}
	// 384 once + 4 × 128 = 896 committed: 4 booted 512 MiB sandboxes
	// would have been 2048, over the capacity.
	if r := m.Resources(); r.UsedMemoryMiB != 896 {
		t.Fatalf("committed %d MiB after 4 clones, want 896", r.UsedMemoryMiB)
	}
	if r := asked[0]; r.SharedMiB != 0 || r.MemoryMiB != 512 {
		t.Errorf("first clone asked %+v, want SharedMiB 0 (nothing counts its template yet)", r)
	}
	if r := asked[3]; r.SharedMiB != 384 || r.UsedMemoryMiB != 384+3*128 {
		t.Errorf("fourth clone asked %+v, want SharedMiB 384 and 768 used", r)
	}
	// A booted sandbox of 512 MiB does not fit in the 604 MiB left.
	if err := m.register(sharedSandbox("b1", 1024, "", 0), admit); err == nil {
		t.Error("a 1024 MiB booted sandbox was admitted over the capacity")
	}
	if r := asked[len(asked)-1]; r.SharedMiB != 0 || r.MemoryMiB != 1024 {
		t.Errorf("booted sandbox asked %+v", r)
	}
	// A clone of another template commits its whole RAM.
	if err := m.register(sharedSandbox("o1", 512, "t2", 384), admit); err != nil {
		t.Fatal(err)
	}
	if r := asked[len(asked)-1]; r.SharedMiB != 0 {
		t.Errorf("first clone of t2 asked %+v, want SharedMiB 0", r)
	}
	// Once every clone of t1 ended, its template RAM is no longer counted.
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		m.byID[id].rec.State = StateStopped
	}
	if r := m.Resources(); r.UsedMemoryMiB != 512 {
		t.Errorf("committed %d MiB with only t2's clone live, want 512", r.UsedMemoryMiB)
	}
}

// The shared memory is kept in the record (and a copy is handed out).
func TestSharedMemoryRecord(t *testing.T) {
	sb := sharedSandbox("a", 512, "t1", 128)
	sb.rec.SharedMemory = sb.Shared.clone()
	r := sb.Record()
	if r.SharedMemory == nil || *r.SharedMemory != (SharedMemory{Template: "t1", MiB: 128}) {
		t.Fatalf("record %+v", r.SharedMemory)
	}
	r.SharedMemory.MiB = 1
	if sb.Record().SharedMemory.MiB != 128 {
		t.Error("Record hands out the sandbox's own SharedMemory")
	}
	if got := (&Manager{}).fromRecord(sb.Record()).Shared; got == nil || *got != *sb.Shared {
		t.Errorf("fromRecord: %+v", got)
	}
}

// A sparse RAM file shares what it holds, not its size.
func TestSharedMemoryOf(t *testing.T) {
	ram := filepath.Join(t.TempDir(), "ram-x")
	f, err := os.Create(ram)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(512 << 20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 3<<20), 100<<20); err != nil { // zeros written are allocated
		t.Fatal(err)
	}
	f.Close()
	s, err := SharedMemoryOf(ram)
	if err != nil {
		t.Fatal(err)
	}
	if s.Template != ram || s.MiB < 3 || s.MiB > 4 {
		t.Errorf("SharedMemoryOf a 512 MiB file with 3 MiB written: %+v, want %s and 3..4 MiB", s, ram)
	}
	if _, err := SharedMemoryOf(ram + ".gone"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// Names are one namespace for every tenant of a host: a name another
// tenant's sandbox holds is refused without naming that sandbox (its id
// would leak past the 404s a tenant gets for others' sandboxes); a name
// the same tenant holds names its sandbox.
func TestNameTakenAcrossTenants(t *testing.T) {
	m := linkedManager(&Manager{byID: map[string]*Sandbox{}, names: map[string]string{}})
	named := func(id, name, tenant string) *Sandbox {
		sb := sharedSandbox(id, 512, "", 0)
		sb.Name, sb.rec.Name, sb.rec.Tenant = name, name, tenant
		return sb
	}
	if err := m.register(named("aaaa11112222", "web", "a"), nil); err != nil {
		t.Fatal(err)
	}
	err := m.register(named("bbbb11112222", "web", "b"), nil)
	if !errors.Is(err, ErrNameTaken) || err.Error() != `sandbox name taken: the name "web" is taken: choose another name` {
		t.Fatalf("other tenant: %v", err)
	}
	err = m.register(named("cccc11112222", "web", "a"), nil)
	if !errors.Is(err, ErrNameTaken) || err.Error() != `sandbox name taken: sandbox aaaa11112222 already has the name "web": choose another name or remove it` {
		t.Fatalf("same tenant: %v", err)
	}
	if len(m.byID) != 1 {
		t.Fatalf("a refused register left %d sandboxes", len(m.byID))
	}
}
