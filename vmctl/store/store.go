package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// SchemaVersion is the layout version this package writes and reads (see
// the package documentation). Any incompatible change to the buckets or
// the JSON in them must increment it and migrate older files in Open.
const SchemaVersion = 1

// DefaultLockTimeout is how long Open waits for another holder of the file
// lock to let go before it fails with ErrLocked.
const DefaultLockTimeout = time.Second

// Error categories, wrapped with %w. Each is a sentinel of an errdefs
// category: ErrNotFound of errdefs.ErrNotFound (errors.Is matches both),
// ErrInvalid of errdefs.ErrInvalidArgument, ErrLocked and ErrSchema of
// errdefs.ErrFailedPrecondition (another agentbox holds or wrote the file:
// stop it, or use another --state-dir).
var (
	// ErrLocked: another process (or another Open in this one) holds the
	// store's file.
	ErrLocked = errdefs.New(errdefs.ErrFailedPrecondition, "", "state store is locked")
	// ErrSchema: the file was written with a schema this agentbox does not
	// understand (newer, or unreadable).
	ErrSchema = errdefs.New(errdefs.ErrFailedPrecondition, "", "unsupported state store schema")
	// ErrNotFound: the sandbox or exec does not exist.
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "", "not found")
	// ErrInvalid: an argument is malformed (an empty ID).
	ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "", "invalid store argument")
)

// Bucket and key names; see the package documentation.
var (
	bucketMeta      = []byte("meta")
	bucketSandboxes = []byte("sandboxes")
	bucketExecs     = []byte("execs")
	bucketExecLog   = []byte("log")
	bucketExecIDs   = []byte("ids")
	keySchema       = []byte("schema")
	keyInstance     = []byte("instance")
)

// Options tunes Open.
type Options struct {
	// LockTimeout bounds the wait for the file lock; 0 means
	// DefaultLockTimeout (1 s). A running daemon never lets go of it, so
	// waiting longer only delays the error.
	LockTimeout time.Duration
}

// Store is the daemon's durable state in one bbolt file. It is safe for
// concurrent use. Close it to release the file lock.
type Store struct {
	db       *bolt.DB
	path     string
	instance string
}

var _ sandbox.Store = (*Store)(nil)

// Open opens the store at path, creating the file (mode 0600) and its
// buckets if it does not exist; the directory must exist. On first
// creation it picks a random instance id (see Instance).
//
// Errors: ErrLocked when another `agentbox serve` holds the file (after
// opts.LockTimeout); ErrSchema when the file has a newer or unreadable
// schema; otherwise bbolt's error (a file that is not a bbolt database,
// permissions) with the path.
func Open(path string, opts Options) (*Store, error) {
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: state store %s is locked by another agentbox serve: stop it or use another --state-dir", ErrLocked, path)
		}
		return nil, fmt.Errorf("open state store %s: %w (if it is not an agentbox state file, use another --state-dir)", path, err)
	}
	s := &Store{db: db, path: path}
	if err := db.Update(s.initialize); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// initialize checks or writes the schema, creates the top-level buckets
// and loads or creates the instance id.
func (s *Store) initialize(tx *bolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return fmt.Errorf("state store %s: create meta bucket: %w", s.path, err)
	}
	if v := meta.Get(keySchema); v == nil {
		if err := meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion))); err != nil {
			return fmt.Errorf("state store %s: write schema: %w", s.path, err)
		}
	} else {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 {
			return fmt.Errorf("%w: state store %s has schema %q, which no agentbox writes: move it away or use another --state-dir", ErrSchema, s.path, v)
		}
		if n > SchemaVersion {
			return fmt.Errorf("%w: state store %s has schema %d, newer than this agentbox understands (%d): run a newer agentbox or use another --state-dir", ErrSchema, s.path, n, SchemaVersion)
		}
	}
	for _, name := range [][]byte{bucketSandboxes, bucketExecs} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("state store %s: create bucket %s: %w", s.path, name, err)
		}
	}
	if v := meta.Get(keyInstance); v != nil {
		s.instance = string(v)
		return nil
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("state store %s: instance id: %w", s.path, err)
	}
	s.instance = hex.EncodeToString(b[:])
	if err := meta.Put(keyInstance, []byte(s.instance)); err != nil {
		return fmt.Errorf("state store %s: write instance id: %w", s.path, err)
	}
	return nil
}

// Close releases the file and its lock. Calls after the first return nil.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close state store %s: %w", s.path, err)
	}
	return nil
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// Instance returns the store's instance id: 16 lowercase hex digits chosen
// at random when the file was created and kept for its life. The daemon
// tags its libvirt domains with it so that, when several daemons share a
// host, each reconciles only its own domains.
func (s *Store) Instance() string { return s.instance }

// PutSandbox inserts or replaces the record with r.ID, stored as JSON.
// Errors: ErrInvalid for an empty ID.
func (s *Store) PutSandbox(r sandbox.Record) error {
	if r.ID == "" {
		return fmt.Errorf("%w: sandbox record without an ID", ErrInvalid)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode sandbox %s: %w", r.ID, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).Put([]byte(r.ID), data)
	})
	if err != nil {
		return fmt.Errorf("state store %s: put sandbox %s: %w", s.path, r.ID, err)
	}
	return nil
}

// DeleteSandbox removes the record with id and, in the same transaction,
// its exec history (see DeleteExecs). A missing record is not an error.
func (s *Store) DeleteSandbox(id string) error {
	if id == "" {
		return fmt.Errorf("%w: delete of a sandbox without an ID", ErrInvalid)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketSandboxes).Delete([]byte(id)); err != nil {
			return err
		}
		return deleteExecs(tx, id)
	})
	if err != nil {
		return fmt.Errorf("state store %s: delete sandbox %s: %w", s.path, id, err)
	}
	return nil
}

// Sandbox returns the record with id. Errors: ErrNotFound.
func (s *Store) Sandbox(id string) (sandbox.Record, error) {
	var r sandbox.Record
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketSandboxes).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
		}
		return json.Unmarshal(v, &r)
	})
	if err != nil {
		return sandbox.Record{}, fmt.Errorf("state store %s: %w", s.path, err)
	}
	return r, nil
}

// Sandboxes returns every record, ordered by ID (callers should not rely on
// an order; sandbox.Store promises none).
func (s *Store) Sandboxes() ([]sandbox.Record, error) {
	var out []sandbox.Record
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			var r sandbox.Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("decode sandbox %s: %w", k, err)
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
