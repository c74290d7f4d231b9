package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Exec is one command of a sandbox's exec history: an attached exec or a
// detached process. The daemon puts it when the command starts and again
// when it ends.
type Exec struct {
	// ID is unique within its sandbox, e.g. "e000001" (see NextExecID).
	ID string `json:"id"`
	// Sandbox is the sandbox ID.
	Sandbox string `json:"sandbox"`
	// Cmd is the argv; Cwd the guest working directory ("" means "/").
	Cmd []string `json:"cmd"`
	Cwd string   `json:"cwd,omitempty"`
	// Detached is set for processes started with POST .../processes.
	Detached bool `json:"detached,omitempty"`
	// StartedAt is when it started; EndedAt when it ended, zero while it
	// runs (or when the daemon lost it). UTC.
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// ExitCode is the shell-style exit code, nil while running.
	ExitCode *int `json:"exit_code,omitempty"`
	// Signal is the number of the signal that killed it, 0 if none.
	Signal int `json:"signal,omitempty"`
	// TimedOut is set when its timeout killed it.
	TimedOut bool `json:"timed_out,omitempty"`
	// Error says why it could not start or why it was lost.
	Error string `json:"error,omitempty"`
	// BytesIn is the stdin it got; BytesOut its stdout plus stderr, in
	// bytes.
	BytesIn  int64 `json:"bytes_in,omitempty"`
	BytesOut int64 `json:"bytes_out,omitempty"`
	// Caller is who started it (see audit.Entry.Caller).
	Caller string `json:"caller,omitempty"`
	// Last is what the daemon last knew of a detached process that ran
	// when its sandbox was paused, written with the pause: a daemon
	// restarted while the sandbox is paused lists it from there, since
	// the paused guest cannot be asked. nil otherwise.
	Last *ProcState `json:"last,omitempty"`
}

// ProcState is the last known state of a running detached process (Exec.Last).
type ProcState struct {
	// Pid is its process id in the guest.
	Pid int `json:"pid"`
	// TtyRows and TtyCols are the size of its terminal; 0 without one.
	TtyRows int `json:"tty_rows,omitempty"`
	TtyCols int `json:"tty_cols,omitempty"`
	// StdinOpen says whether its stdin accepted bytes.
	StdinOpen bool `json:"stdin_open,omitempty"`
	// OutputBytes is the end offset of its combined output, and
	// OutputDropped the oldest offset the guest still kept, in bytes.
	OutputBytes   int64 `json:"output_bytes"`
	OutputDropped int64 `json:"output_dropped,omitempty"`
}

// NextExecID returns a new exec ID for the sandbox: "e" and a sequence
// number of at least six digits ("e000001", "e000002", …), never handed
// out twice for that sandbox while its record exists. Errors: ErrNotFound
// when no record of the sandbox exists.
func (s *Store) NextExecID(sandboxID string) (string, error) {
	var id string
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := execBucket(tx, sandboxID)
		if err != nil {
			return err
		}
		n, err := b.NextSequence()
		if err != nil {
			return err
		}
		id = fmt.Sprintf("e%06d", n)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("state store %s: next exec id of sandbox %s: %w", s.path, sandboxID, err)
	}
	return id, nil
}

// PutExec inserts e into the history of e.Sandbox, or replaces the exec
// with the same ID there (keeping its place in the order). Errors:
// ErrInvalid for an empty Sandbox or ID; ErrNotFound when no record of the
// sandbox exists (so an exec that ends after its sandbox was removed leaves
// nothing behind).
func (s *Store) PutExec(e Exec) error {
	if e.Sandbox == "" || e.ID == "" {
		return fmt.Errorf("%w: exec needs a sandbox and an ID (got %q, %q)", ErrInvalid, e.Sandbox, e.ID)
	}
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode exec %s/%s: %w", e.Sandbox, e.ID, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := execBucket(tx, e.Sandbox)
		if err != nil {
			return err
		}
		log, ids := b.Bucket(bucketExecLog), b.Bucket(bucketExecIDs)
		key := ids.Get([]byte(e.ID))
		if key == nil {
			n, err := log.NextSequence()
			if err != nil {
				return err
			}
			key = binary.BigEndian.AppendUint64(nil, n)
			if err := ids.Put([]byte(e.ID), key); err != nil {
				return err
			}
		}
		return log.Put(key, data)
	})
	if err != nil {
		return fmt.Errorf("state store %s: put exec %s of sandbox %s: %w", s.path, e.ID, e.Sandbox, err)
	}
	return nil
}

// Exec returns one exec of a sandbox. Errors: ErrNotFound.
func (s *Store) Exec(sandboxID, execID string) (Exec, error) {
	var e Exec
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketExecs).Bucket([]byte(sandboxID))
		var key []byte
		if b != nil {
			key = b.Bucket(bucketExecIDs).Get([]byte(execID))
		}
		if key == nil {
			return fmt.Errorf("exec %s of sandbox %s: %w", execID, sandboxID, ErrNotFound)
		}
		return json.Unmarshal(b.Bucket(bucketExecLog).Get(key), &e)
	})
	if err != nil {
		return Exec{}, fmt.Errorf("state store %s: %w", s.path, err)
	}
	return e, nil
}

// Execs returns a sandbox's exec history, oldest first (in the order the
// execs were first put). With limit > 0 it returns only the newest limit
// execs, still oldest first. A sandbox without history (or without a
// record) has none: the result is empty, not an error.
func (s *Store) Execs(sandboxID string, limit int) ([]Exec, error) {
	var out []Exec
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketExecs).Bucket([]byte(sandboxID))
		if b == nil {
			return nil
		}
		c := b.Bucket(bucketExecLog).Cursor()
		k, v := c.First()
		if limit > 0 {
			// Walk back from the newest to the first of the last limit.
			k, v = c.Last()
			for i := 1; i < limit && k != nil; i++ {
				k, v = c.Prev()
			}
			if k == nil {
				k, v = c.First()
			}
		}
		for ; k != nil; k, v = c.Next() {
			var e Exec
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("decode exec %x of sandbox %s: %w", k, sandboxID, err)
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("state store %s: %w", s.path, err)
	}
	return out, nil
}

// DeleteExecs removes a sandbox's whole exec history and its NextExecID
// counter. DeleteSandbox calls it too; a sandbox without history is not an
// error.
func (s *Store) DeleteExecs(sandboxID string) error {
	if err := s.db.Update(func(tx *bolt.Tx) error { return deleteExecs(tx, sandboxID) }); err != nil {
		return fmt.Errorf("state store %s: delete execs of sandbox %s: %w", s.path, sandboxID, err)
	}
	return nil
}

func deleteExecs(tx *bolt.Tx, sandboxID string) error {
	err := tx.Bucket(bucketExecs).DeleteBucket([]byte(sandboxID))
	if errors.Is(err, berrors.ErrBucketNotFound) {
		return nil
	}
	return err
}

// execBucket returns (creating) the exec bucket of a sandbox whose record
// exists, with its log and ids sub-buckets.
func execBucket(tx *bolt.Tx, sandboxID string) (*bolt.Bucket, error) {
	if sandboxID == "" {
		return nil, fmt.Errorf("%w: empty sandbox ID", ErrInvalid)
	}
	if tx.Bucket(bucketSandboxes).Get([]byte(sandboxID)) == nil {
		return nil, fmt.Errorf("sandbox %s: %w (it was removed, or never put)", sandboxID, ErrNotFound)
	}
	b, err := tx.Bucket(bucketExecs).CreateBucketIfNotExists([]byte(sandboxID))
	if err != nil {
		return nil, err
	}
	for _, name := range [][]byte{bucketExecLog, bucketExecIDs} {
		if _, err := b.CreateBucketIfNotExists(name); err != nil {
			return nil, err
		}
	}
	return b, nil
}
