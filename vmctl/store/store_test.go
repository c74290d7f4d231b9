package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentbox/agentbox/vmctl/sandbox"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func record(id string) sandbox.Record {
	t0 := time.Date(2026, 11, 29, 14, 2, 11, 120_000_000, time.UTC)
	return sandbox.Record{
		ID:          id,
		Name:        "work-" + id[:4],
		State:       sandbox.StateRunning,
		Domain:      sandbox.DomainPrefix + id,
		ImageName:   "debian-minimal",
		ImageDigest: "sha256:0123",
		ImageDir:    "/images/debian-minimal",
		Accel:       "tcg",
		DomainType:  "qemu",
		VCPUs:       1,
		MemoryMiB:   256,
		Labels:      map[string]string{"team": "a", "run": id},
		Dir:         "/state/" + id,
		Overlay:     "/state/" + id + "/overlay.qcow2",
		ConsoleLog:  "/state/" + id + "/console.log",
		AgentSocket: "/run/agentbox/" + id + ".sock",
		CreatedAt:   t0,
		StartedAt:   t0.Add(2100 * time.Millisecond),
		BootMs:      2100,
		Extra:       []byte(`{"ttl_ms":60000}`),
	}
}

func sortedSandboxes(t *testing.T, s *Store) []sandbox.Record {
	t.Helper()
	rs, err := s.Sandboxes()
	if err != nil {
		t.Fatalf("Sandboxes: %v", err)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
	return rs
}

func TestSandboxRoundTrip(t *testing.T) {
	s, _ := openTemp(t)
	if rs := sortedSandboxes(t, s); len(rs) != 0 {
		t.Fatalf("new store has %d records, want 0", len(rs))
	}
	a, b := record("aaaaaaaaaaaa"), record("bbbbbbbbbbbb")
	b.State, b.Reason, b.StoppedAt = sandbox.StateFailed, "domain vanished", b.StartedAt.Add(time.Minute)
	for _, r := range []sandbox.Record{b, a} {
		if err := s.PutSandbox(r); err != nil {
			t.Fatalf("PutSandbox(%s): %v", r.ID, err)
		}
	}
	if got, want := sortedSandboxes(t, s), []sandbox.Record{a, b}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Sandboxes:\n got %+v\nwant %+v", got, want)
	}
	got, err := s.Sandbox(b.ID)
	if err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("Sandbox(%s) = %+v, %v; want %+v", b.ID, got, err, b)
	}
	if _, err := s.Sandbox("cccccccccccc"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Sandbox(missing) error = %v, want ErrNotFound", err)
	}
}

func TestPutSandboxReplaces(t *testing.T) {
	s, _ := openTemp(t)
	r := record("aaaaaaaaaaaa")
	if err := s.PutSandbox(r); err != nil {
		t.Fatal(err)
	}
	r.State, r.StoppedAt, r.Labels = sandbox.StateStopped, r.StartedAt.Add(time.Hour), nil
	if err := s.PutSandbox(r); err != nil {
		t.Fatal(err)
	}
	if got := sortedSandboxes(t, s); !reflect.DeepEqual(got, []sandbox.Record{r}) {
		t.Fatalf("after replace: %+v, want only %+v", got, r)
	}
}

func TestPutSandboxEmptyID(t *testing.T) {
	s, _ := openTemp(t)
	if err := s.PutSandbox(sandbox.Record{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("PutSandbox(no ID) error = %v, want ErrInvalid", err)
	}
	if err := s.DeleteSandbox(""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("DeleteSandbox(\"\") error = %v, want ErrInvalid", err)
	}
}

func TestDeleteSandbox(t *testing.T) {
	s, _ := openTemp(t)
	a, b := record("aaaaaaaaaaaa"), record("bbbbbbbbbbbb")
	for _, r := range []sandbox.Record{a, b} {
		if err := s.PutSandbox(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteSandbox(a.ID); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	if got := sortedSandboxes(t, s); !reflect.DeepEqual(got, []sandbox.Record{b}) {
		t.Fatalf("after delete: %+v, want only %s", got, b.ID)
	}
	if err := s.DeleteSandbox(a.ID); err != nil {
		t.Fatalf("DeleteSandbox of a missing record: %v, want nil", err)
	}
	if err := s.DeleteSandbox("never-existed"); err != nil {
		t.Fatalf("DeleteSandbox of an unknown id: %v, want nil", err)
	}
}

func TestReopenPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	instance := s.Instance()
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(instance) {
		t.Fatalf("Instance() = %q, want 16 lowercase hex digits", instance)
	}
	a := record("aaaaaaaaaaaa")
	if err := s.PutSandbox(a); err != nil {
		t.Fatal(err)
	}
	id, err := s.NextExecID(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	code := 0
	ex := Exec{ID: id, Sandbox: a.ID, Cmd: []string{"true"}, StartedAt: a.StartedAt, EndedAt: a.StartedAt.Add(time.Second), ExitCode: &code, Caller: "uid:0"}
	if err := s.PutExec(ex); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v, want nil", err)
	}

	s2, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s2.Close()
	if got := s2.Instance(); got != instance {
		t.Fatalf("Instance after reopen = %q, want %q", got, instance)
	}
	if got := sortedSandboxes(t, s2); !reflect.DeepEqual(got, []sandbox.Record{a}) {
		t.Fatalf("after reopen: %+v, want %+v", got, a)
	}
	execs, err := s2.Execs(a.ID, 0)
	if err != nil || !reflect.DeepEqual(execs, []Exec{ex}) {
		t.Fatalf("Execs after reopen = %+v, %v; want %+v", execs, err, ex)
	}
	if next, err := s2.NextExecID(a.ID); err != nil || next != "e000002" {
		t.Fatalf("NextExecID after reopen = %q, %v; want e000002", next, err)
	}
}

func TestInstanceDiffersPerFile(t *testing.T) {
	a, _ := openTemp(t)
	b, _ := openTemp(t)
	if a.Instance() == b.Instance() {
		t.Fatalf("two new stores share instance id %q", a.Instance())
	}
}

func TestConcurrentPuts(t *testing.T) {
	s, _ := openTemp(t)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r := record(fmt.Sprintf("%06x%06x", w, i))
				if err := s.PutSandbox(r); err != nil {
					errs <- err
					continue
				}
				r.State = sandbox.StateStopped
				if err := s.PutSandbox(r); err != nil {
					errs <- err
				}
				if _, err := s.Sandboxes(); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent put: %v", err)
	}
	rs := sortedSandboxes(t, s)
	if len(rs) != workers*each {
		t.Fatalf("%d records, want %d", len(rs), workers*each)
	}
	for _, r := range rs {
		if r.State != sandbox.StateStopped {
			t.Fatalf("record %s has state %s, want the second put's %s", r.ID, r.State, sandbox.StateStopped)
		}
	}
}

func TestConcurrentExecs(t *testing.T) {
	s, _ := openTemp(t)
	a := record("aaaaaaaaaaaa")
	if err := s.PutSandbox(a); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 20
	var wg sync.WaitGroup
	ids := make(chan string, workers*each)
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				id, err := s.NextExecID(a.ID)
				if err != nil {
					errs <- err
					continue
				}
				if err := s.PutExec(Exec{ID: id, Sandbox: a.ID, Cmd: []string{"echo", id}}); err != nil {
					errs <- err
					continue
				}
				ids <- id
			}
		})
	}
	wg.Wait()
	close(ids)
	close(errs)
	for err := range errs {
		t.Errorf("concurrent exec: %v", err)
	}
	seen := map[string]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("NextExecID handed out %s twice", id)
		}
		seen[id] = true
	}
	execs, err := s.Execs(a.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(execs) != workers*each {
		t.Fatalf("%d execs, want %d", len(execs), workers*each)
	}
	for i := 1; i <= workers*each; i++ {
		if id := fmt.Sprintf("e%06d", i); !seen[id] {
			t.Fatalf("exec id %s was never handed out; ids must be dense", id)
		}
	}
}

func TestSecondOpenerFailsFast(t *testing.T) {
	_, path := openTemp(t)
	s2, err := Open(path, Options{LockTimeout: 50 * time.Millisecond})
	if err == nil {
		s2.Close()
		t.Fatal("second Open of a held store succeeded")
	}
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open error = %v, want ErrLocked", err)
	}
	want := "state store " + path + " is locked by another agentbox serve: stop it or use another --state-dir"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("second Open error = %q, want it to contain %q", err, want)
	}
}

func TestLockReleasedByClose(t *testing.T) {
	s, path := openTemp(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path, Options{LockTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s2.Close()
}

// setSchema rewrites meta/schema of a closed store file.
func setSchema(t *testing.T, path, v string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte(v)) }); err != nil {
		t.Fatal(err)
	}
}

func TestSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		if v := string(tx.Bucket(bucketMeta).Get(keySchema)); v != "1" {
			return fmt.Errorf("meta/schema = %q, want \"1\"", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	for _, tc := range []struct{ schema, want string }{
		{"2", "state store " + path + " has schema 2, newer than this agentbox understands (1): run a newer agentbox or use another --state-dir"},
		{"zz", `state store ` + path + ` has schema "zz", which no agentbox writes`},
	} {
		setSchema(t, path, tc.schema)
		s, err := Open(path, Options{})
		if err == nil {
			s.Close()
			t.Fatalf("Open of schema %s succeeded", tc.schema)
		}
		if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Open of schema %s: %q, want ErrSchema containing %q", tc.schema, err, tc.want)
		}
	}
	// A refused file is released: fixing it makes it usable again.
	setSchema(t, path, "1")
	s, err = Open(path, Options{LockTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open after the schema was fixed: %v", err)
	}
	s.Close()
}

func TestOpenNotABoltFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database\n", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err == nil {
		s.Close()
		t.Fatal("Open of a text file succeeded")
	}
	if !strings.Contains(err.Error(), "open state store "+path) {
		t.Fatalf("error %q does not name the file", err)
	}
}

func TestFileMode(t *testing.T) {
	_, path := openTemp(t)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Fatalf("state file mode %v, want 0600", perm)
	}
}
