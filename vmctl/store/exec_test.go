package store

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func intp(n int) *int { return &n }

// putExecs puts n execs with IDs from NextExecID and returns them.
func putExecs(t *testing.T, s *Store, sandboxID string, n int) []Exec {
	t.Helper()
	t0 := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	var out []Exec
	for i := range n {
		id, err := s.NextExecID(sandboxID)
		if err != nil {
			t.Fatalf("NextExecID: %v", err)
		}
		e := Exec{
			ID: id, Sandbox: sandboxID, Cmd: []string{"sh", "-c", fmt.Sprintf("exit %d", i)}, Cwd: "/work",
			StartedAt: t0.Add(time.Duration(i) * time.Second), Caller: "uid:1000",
		}
		if err := s.PutExec(e); err != nil {
			t.Fatalf("PutExec(%s): %v", id, err)
		}
		out = append(out, e)
	}
	return out
}

func TestNextExecID(t *testing.T) {
	s, _ := openTemp(t)
	a, b := record("aaaaaaaaaaaa"), record("bbbbbbbbbbbb")
	for _, r := range []string{a.ID, b.ID} {
		if err := s.PutSandbox(record(r)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []struct{ sandbox, id string }{
		{a.ID, "e000001"}, {a.ID, "e000002"}, {b.ID, "e000001"}, {a.ID, "e000003"},
	} {
		got, err := s.NextExecID(want.sandbox)
		if err != nil || got != want.id {
			t.Fatalf("NextExecID(%s) = %q, %v; want %q", want.sandbox, got, err, want.id)
		}
	}
	if _, err := s.NextExecID("cccccccccccc"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("NextExecID of an unknown sandbox: %v, want ErrNotFound", err)
	}
}

func TestExecOrderAndLimit(t *testing.T) {
	s, _ := openTemp(t)
	a := record("aaaaaaaaaaaa")
	if err := s.PutSandbox(a); err != nil {
		t.Fatal(err)
	}
	// IDs that sort the other way round from their insertion order.
	want := []Exec{
		{ID: "zeta", Sandbox: a.ID, Cmd: []string{"1"}},
		{ID: "beta", Sandbox: a.ID, Cmd: []string{"2"}},
		{ID: "alpha", Sandbox: a.ID, Cmd: []string{"3"}},
	}
	want = append(want, putExecs(t, s, a.ID, 0)...)
	for _, e := range want {
		if err := s.PutExec(e); err != nil {
			t.Fatal(err)
		}
	}
	more := putExecs(t, s, a.ID, 9)
	want = append(want, more...)
	for _, tc := range []struct {
		limit int
		want  []Exec
	}{
		{0, want},
		{-1, want},
		{1, want[11:]},
		{5, want[7:]},
		{12, want},
		{100, want},
	} {
		got, err := s.Execs(a.ID, tc.limit)
		if err != nil {
			t.Fatalf("Execs(limit %d): %v", tc.limit, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("Execs(limit %d) = %v, want %v", tc.limit, ids(got), ids(tc.want))
		}
	}
}

func ids(es []Exec) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func TestPutExecUpdatesInPlace(t *testing.T) {
	s, _ := openTemp(t)
	a := record("aaaaaaaaaaaa")
	if err := s.PutSandbox(a); err != nil {
		t.Fatal(err)
	}
	execs := putExecs(t, s, a.ID, 3)
	mid := execs[1]
	mid.EndedAt = mid.StartedAt.Add(41 * time.Millisecond)
	mid.ExitCode, mid.Signal, mid.TimedOut = intp(137), 9, true
	mid.BytesIn, mid.BytesOut, mid.Error = 5, 1<<20, ""
	if err := s.PutExec(mid); err != nil {
		t.Fatal(err)
	}
	execs[1] = mid
	got, err := s.Execs(a.ID, 0)
	if err != nil || !reflect.DeepEqual(got, execs) {
		t.Fatalf("Execs after update = %+v, %v; want %+v", got, err, execs)
	}
	one, err := s.Exec(a.ID, mid.ID)
	if err != nil || !reflect.DeepEqual(one, mid) {
		t.Fatalf("Exec(%s) = %+v, %v; want %+v", mid.ID, one, err, mid)
	}
	if _, err := s.Exec(a.ID, "e999999"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Exec(unknown id): %v, want ErrNotFound", err)
	}
	if _, err := s.Exec("cccccccccccc", mid.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Exec(unknown sandbox): %v, want ErrNotFound", err)
	}
}

func TestPutExecNeedsSandbox(t *testing.T) {
	s, _ := openTemp(t)
	if err := s.PutExec(Exec{ID: "e000001", Sandbox: "cccccccccccc"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("PutExec for an unknown sandbox: %v, want ErrNotFound", err)
	}
	for _, e := range []Exec{{ID: "e1"}, {Sandbox: "cccccccccccc"}} {
		if err := s.PutExec(e); !errors.Is(err, ErrInvalid) {
			t.Fatalf("PutExec(%+v): %v, want ErrInvalid", e, err)
		}
	}
	if got, err := s.Execs("cccccccccccc", 0); err != nil || len(got) != 0 {
		t.Fatalf("Execs(unknown) = %v, %v; want none, nil", got, err)
	}
}

func TestExecsDeletedWithSandbox(t *testing.T) {
	s, _ := openTemp(t)
	a, b := record("aaaaaaaaaaaa"), record("bbbbbbbbbbbb")
	for _, r := range []string{a.ID, b.ID} {
		if err := s.PutSandbox(record(r)); err != nil {
			t.Fatal(err)
		}
	}
	putExecs(t, s, a.ID, 3)
	keep := putExecs(t, s, b.ID, 2)
	if err := s.DeleteSandbox(a.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Execs(a.ID, 0); err != nil || len(got) != 0 {
		t.Fatalf("Execs of a deleted sandbox = %v, %v; want none", ids(got), err)
	}
	if got, err := s.Execs(b.ID, 0); err != nil || !reflect.DeepEqual(got, keep) {
		t.Fatalf("Execs of the other sandbox = %v, %v; want %v", ids(got), err, ids(keep))
	}
	// An exec that ends after its sandbox was removed leaves nothing.
	if err := s.PutExec(Exec{ID: "e000003", Sandbox: a.ID}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("PutExec after delete: %v, want ErrNotFound", err)
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketExecs).Bucket([]byte(a.ID)) != nil {
			return fmt.Errorf("execs/%s still exists", a.ID)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestDeleteExecs(t *testing.T) {
	s, _ := openTemp(t)
	a := record("aaaaaaaaaaaa")
	if err := s.PutSandbox(a); err != nil {
		t.Fatal(err)
	}
	putExecs(t, s, a.ID, 4)
	if err := s.DeleteExecs(a.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Execs(a.ID, 0); err != nil || len(got) != 0 {
		t.Fatalf("Execs after DeleteExecs = %v, %v; want none", ids(got), err)
	}
	if err := s.DeleteExecs(a.ID); err != nil {
		t.Fatalf("second DeleteExecs: %v, want nil", err)
	}
	if _, err := s.Sandbox(a.ID); err != nil {
		t.Fatalf("DeleteExecs removed the record: %v", err)
	}
	if id, err := s.NextExecID(a.ID); err != nil || id != "e000001" {
		t.Fatalf("NextExecID after DeleteExecs = %q, %v; want e000001 (the counter goes with the history)", id, err)
	}
}
