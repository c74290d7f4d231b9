// Package audit keeps the daemon's audit trail: one JSON object (an
// [Entry]) per line for every action a caller takes on a sandbox, in an
// append-only log rotated by size; it reads the trail back with a filter
// (the timeline `agentbox audit --replay` renders from it is the CLI's,
// cmd/agentbox/replay.go). [OutputDigester] summarises a command's
// output (length, SHA-256, first bytes) for an entry without keeping it.
//
// # File layout
//
// A log lives in one directory (mode 0700, created if missing), files mode
// 0600:
//
//	audit.jsonl      the active file; new entries are appended here
//	audit.jsonl.1    the newest rotated file
//	audit.jsonl.2    older …
//	audit.jsonl.N    the oldest kept (N ≤ Options.MaxFiles)
//
// Before an append would make the active file larger than
// Options.MaxBytes, the log rotates: audit.jsonl.N-1 becomes .N (the
// oldest beyond MaxFiles is deleted), …, audit.jsonl becomes .1, and a new
// audit.jsonl starts. A single entry larger than MaxBytes gets a file of
// its own. Readers walk the highest number first and the active file last,
// so entries come out in the order they were appended.
//
// # Guarantees
//
//   - Each entry is one line written with one write(2) on a file opened
//     O_APPEND, under the log's mutex: lines never interleave, also with
//     many goroutines appending at once.
//   - Appends are not fsync'd one by one (an exec-heavy sandbox would pay a
//     disk flush per command); the kernel writes them back within seconds,
//     and [Log.Sync] and [Log.Close] flush. A crash of the daemon loses
//     nothing already appended; a crash of the host may lose the last
//     seconds and may tear the last line.
//   - A torn last line (crash mid-write) is repaired when the log is opened
//     again: cut off if it is not a whole entry, terminated with a newline
//     if it is. Readers skip a torn last line silently and skip (and log)
//     any other line that is not an entry; a bad line never fails a read.
//   - Entries are never rewritten; only rotation deletes, and only whole
//     files beyond MaxFiles.
//
// # Guest-caused entries
//
// Entries a guest's traffic causes (the egress proxy's decisions) go
// through [Log.AppendGuest], which bounds what the guest controls: every
// string is cut to [MaxFieldBytes] (4 KiB, marked "…[cut: N bytes]"),
// the entry to [MaxGuestEntryBytes] (16 KiB), and a sandbox gets at most
// [GuestBurst] (60) of them at once, then [GuestPerSecond] (1) a second;
// the dropped ones are counted in one [ActionGuestDropped] entry before
// the sandbox's next one (or at Close). So no guest can grow one entry or
// flood the log until rotation deletes the other tenants' entries.
package audit
