// Package store keeps the daemon's durable state in one bbolt file
// (go.etcd.io/bbolt): the sandbox records the manager writes at every state
// change (it implements sandbox.Store), each sandbox's exec history, and
// the daemon's instance id.
//
// # File layout
//
// The file is STATE_DIR/state.db by convention (the caller picks the path),
// mode 0600. Its buckets:
//
//	meta                   "schema" → "1" (decimal ASCII, see SchemaVersion)
//	                       "instance" → 16 lowercase hex digits (see Store.Instance)
//	sandboxes              sandbox ID → sandbox.Record as JSON
//	execs/<sandbox ID>     one bucket per sandbox; its own bbolt sequence
//	                       numbers the IDs NextExecID hands out
//	execs/<ID>/log         8-byte big-endian insertion sequence → Exec as JSON
//	execs/<ID>/ids         Exec.ID → its 8-byte key in log
//
// Keys of log come from the bucket's NextSequence, so a cursor walks the
// history in insertion order; ids lets PutExec update an exec in place.
//
// # Guarantees
//
// Every method is one bbolt transaction: a write is on disk (fsync'd) when
// it returns, and a crash (kill -9, power loss) leaves either the old or
// the new state, never a mix. The file is locked (flock) while open: a
// second process, or a second Open in the same process, gets ErrLocked
// after Options.LockTimeout (default 1 s) instead of waiting. A file
// written by a newer agentbox (a schema above SchemaVersion) is refused
// with ErrSchema rather than misread. All methods are safe for concurrent
// use; bbolt serialises writers.
package store
