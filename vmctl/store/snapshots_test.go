package store

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/sandbox"
)

func TestSnapshotRecordsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Snapshots(); err != nil || len(got) != 0 {
		t.Fatalf("Snapshots on a new store = %v, %v; want none", got, err)
	}
	if err := s.DeleteSnapshot("aaaaaaaaaaaa"); err != nil {
		t.Fatalf("DeleteSnapshot of a missing record: %v", err)
	}
	want := sandbox.SnapshotRecord{ID: "0123456789ab", Name: "before", Tag: "0123456789ab", SandboxID: "ba9876543210",
		File: "/state/sandboxes/ba9876543210/overlay.qcow2", VCPUs: 1, MemoryMiB: 256, Extra: []byte(`{"limits":{}}`),
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), VMStateBytes: 123, DiskBytes: 456}
	if err := s.PutSnapshot(want); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSnapshot(sandbox.SnapshotRecord{}); err == nil {
		t.Fatal("PutSnapshot without an ID succeeded")
	}
	s.Close()
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Snapshots()
	if err != nil || len(got) != 1 {
		t.Fatalf("Snapshots after reopen = %v, %v; want one", got, err)
	}
	if got[0].Name != want.Name || got[0].File != want.File || !got[0].CreatedAt.Equal(want.CreatedAt) || string(got[0].Extra) != string(want.Extra) || got[0].DiskBytes != 456 {
		t.Errorf("record = %+v, want %+v", got[0], want)
	}
	if err := s.DeleteSnapshot(want.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Snapshots(); len(got) != 0 {
		t.Errorf("after delete: %v", got)
	}
}
