package store

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// bucketSnapshots holds snapshot ID → sandbox.SnapshotRecord as JSON. It is
// created on first use, so stores written before snapshots existed open
// unchanged (no schema change).
var bucketSnapshots = []byte("snapshots")

var _ sandbox.SnapshotStore = (*Store)(nil)

// PutSnapshot inserts or replaces the snapshot record with r.ID, stored as
// JSON. Errors: ErrInvalid for an empty ID.
func (s *Store) PutSnapshot(r sandbox.SnapshotRecord) error {
	if r.ID == "" {
		return fmt.Errorf("%w: snapshot record without an ID", ErrInvalid)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode snapshot %s: %w", r.ID, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketSnapshots)
		if err != nil {
			return err
		}
		return b.Put([]byte(r.ID), data)
	})
	if err != nil {
		return fmt.Errorf("state store %s: put snapshot %s: %w", s.path, r.ID, err)
	}
	return nil
}

// DeleteSnapshot removes the snapshot record with id. A missing record is
// not an error.
func (s *Store) DeleteSnapshot(id string) error {
	if id == "" {
		return fmt.Errorf("%w: delete of a snapshot without an ID", ErrInvalid)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSnapshots)
		if b == nil {
			return nil
		}
		return b.Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("state store %s: delete snapshot %s: %w", s.path, id, err)
	}
	return nil
}

// Snapshots returns every snapshot record, ordered by ID.
func (s *Store) Snapshots() ([]sandbox.SnapshotRecord, error) {
	var out []sandbox.SnapshotRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSnapshots)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var r sandbox.SnapshotRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("decode snapshot %s: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("state store %s: %w", s.path, err)
	}
	return out, nil
}
