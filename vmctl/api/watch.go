package api

import "time"

// Watch event ops (WatchEvent.Op). The change kinds are those of the
// guest agent (agentproto.WatchOp), passed through unchanged.
const (
	// WatchCreate: an entry appeared (created, or moved in from outside
	// the watched tree). In a recursive watch, what a new directory
	// already holds when the guest starts watching it is reported as
	// CREATE too, parents before children.
	WatchCreate = "CREATE"
	// WatchWrite: a file's content changed. Each write(2) makes one; the
	// guest kernel merges a write into the previous WRITE while both are
	// unread, so a burst of writes is one or more WRITE events.
	WatchWrite = "WRITE"
	// WatchRemove: an entry was deleted.
	WatchRemove = "REMOVE"
	// WatchRename: an entry was renamed; Path is the old path, To the new
	// one (empty when it moved out of the watched tree).
	WatchRename = "RENAME"
	// WatchChmod: an entry's metadata changed (mode, owner, times, link
	// count).
	WatchChmod = "CHMOD"
	// WatchOverflow: the guest's event queue overflowed and changes were
	// lost; Path is the watched path. The watch goes on; rescan if the
	// exact state matters.
	WatchOverflow = "OVERFLOW"
	// WatchError ends a stream that failed after it began (the sandbox
	// stopped, the guest died); Error says why.
	WatchError = "ERROR"
)

// WatchEvent is one line of GET /v1/sandboxes/{id}/files/watch
// (application/x-ndjson): the changes below the watched path, in the
// order the guest saw them. The stream ends when the client goes, after
// the watched path's own REMOVE or RENAME, or with one ERROR.
type WatchEvent struct {
	// Op is one of the Watch* constants.
	Op string `json:"op"`
	// Path is the absolute guest path that changed (the old path of a
	// RENAME, the watched path of an OVERFLOW); empty for ERROR.
	Path string `json:"path,omitempty"`
	// To is the new path of a RENAME within the watched tree.
	To string `json:"to,omitempty"`
	// Info describes the entry (at To for a RENAME: type, size, mode) when
	// it still existed as the guest read the event; absent for REMOVE,
	// OVERFLOW and entries gone since. A symbolic link is described
	// itself, not followed.
	Info *FileInfo `json:"info,omitempty"`
	// Time is when the guest read the event (the guest's clock).
	Time time.Time `json:"time,omitzero"`
	// Error is set on ERROR.
	Error *Error `json:"error,omitempty"`
}
