package agentproto

// This file holds the messages of OpWatch (file watching). The exchange:
//
//	host → guest  FrameRequest {op: "watch", watch: WatchRequest}
//	guest → host  FrameResponse WatchStarted    (the watch is in place), or FrameError
//	guest → host  FrameData [WatchEvent, …]     (one JSON array per batch), repeated
//	guest → host  FrameDataEnd                  (the watched path itself went away), or
//	              FrameError                    (the guest could not go on watching)
//
// The watch lasts until the host closes its side of the stream (or the
// session ends); the host sends nothing after its request. Any change made
// after the host read WatchStarted is reported.

// WatchOp is the kind of a [WatchEvent]. The values are part of the
// protocol (and of the REST API, which passes them through).
type WatchOp string

// Watch event kinds.
const (
	// WatchCreate: an entry appeared (created, hard-linked, or moved in
	// from outside the watched tree). In a recursive watch, the entries a
	// new directory already holds when its watch is added are reported
	// as CREATE too (the directory is scanned), parents before children.
	WatchCreate WatchOp = "CREATE"
	// WatchWrite: a file's content changed (inotify IN_MODIFY: write(2),
	// truncate(2)). Each write call makes one; the kernel merges an event
	// into the previous one while both are unread and identical, so a
	// burst of writes is one or more WRITE events, never zero.
	WatchWrite WatchOp = "WRITE"
	// WatchRemove: an entry was deleted. A directory removed with its
	// content reports its entries first (as `rm -r` deletes them).
	WatchRemove WatchOp = "REMOVE"
	// WatchRename: an entry was renamed. Path is the old path; To is the
	// new one when it is inside the watched tree, empty when the entry
	// moved out of it.
	WatchRename WatchOp = "RENAME"
	// WatchChmod: an entry's metadata changed (inotify IN_ATTRIB:
	// permissions, owner, timestamps, link count, extended attributes).
	WatchChmod WatchOp = "CHMOD"
	// WatchOverflow: the guest kernel's event queue overflowed
	// (IN_Q_OVERFLOW) and events were lost; Path is the watched path.
	// The watch goes on (a recursive watch re-adds watches for
	// directories it may have missed); a client that needs the exact
	// state rescans.
	WatchOverflow WatchOp = "OVERFLOW"
)

// WatchRequest is the request of OpWatch.
type WatchRequest struct {
	// Path is the absolute guest path to watch, a directory (its entries'
	// changes are reported) or a file (its own changes). It must exist.
	Path string `json:"path"`
	// Recursive watches every directory below Path too, including those
	// created (or moved in) while the watch runs.
	Recursive bool `json:"recursive,omitempty"`
}

// WatchStarted is the FrameResponse of OpWatch, sent once the watch is in
// place and before any event.
type WatchStarted struct {
	// Dirs is the number of directories watched (1 for a file or a
	// non-recursive watch).
	Dirs int `json:"dirs"`
}

// WatchEvent is one change reported by OpWatch.
type WatchEvent struct {
	// Op is the kind of change.
	Op WatchOp `json:"op"`
	// Path is the absolute guest path of the entry that changed (the old
	// path of a RENAME, the watched path of an OVERFLOW).
	Path string `json:"path"`
	// To is the new path of a RENAME within the watched tree.
	To string `json:"to,omitempty"`
	// Info describes the entry (at To for a RENAME) when it still existed
	// as the event was read (lstat: a symbolic link is described itself);
	// nil for REMOVE, OVERFLOW and entries gone since.
	Info *FileInfo `json:"info,omitempty"`
	// TimeNs is when the guest read the event, in nanoseconds since the
	// Unix epoch.
	TimeNs int64 `json:"time_ns"`
}

// WatchBatch is the most events one FrameData of OpWatch carries. The
// guest also keeps a frame's JSON far below MaxPayload (long paths), so a
// burst of events (a directory scan reports one per entry) comes in as
// many frames as it needs.
const WatchBatch = 256

// Validate checks the request's shape. Errors are *Error with CodeInvalid.
func (r *WatchRequest) Validate() error {
	_, err := CleanPath(r.Path)
	return err
}
