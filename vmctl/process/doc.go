// Package process is the host's view of a sandbox's detached processes:
// commands started in the guest that outlive the request that started
// them (E2B/Daytona-style background commands), and the host itself. The
// guest agent keeps them (vmctl/guestagent/procs: output ring of
// agentproto.ProcRingBytes per process, stdin, exit status, at most
// agentproto.ProcMax), so they survive the agent connection and a daemon
// restart. The daemon holds one [Table] per sandbox and maps the
// package's sentinel errors to API errors.
//
// A process is started with [Table.Start] under an id the caller chooses
// (the exec id), and returns at once. From then on the table:
//
//   - watches it for its end and calls Options.OnExit once (audit log,
//     exec history) before the end is visible ([Info.State]: running,
//     exited with an agentproto.ExitStatus, or lost when the guest could
//     not tell);
//   - passes its output from any offset the guest still keeps to any
//     number of readers, optionally following it ([Table.Output]; an
//     offset that fell out of the ring is a [DroppedError]);
//   - passes stdin to it when it was started with stdinOpen
//     ([Table.WriteStdin]) and signals to its process group
//     ([Table.Signal]).
//
// Lifetimes: the command lives in the guest until it ends or is killed;
// the table's watchers live until [Table.CloseAll] (the sandbox goes away:
// running processes become lost and are killed) or [Table.Detach] (the
// daemon shuts down: they run on). A new table takes over what the guest
// kept with [Table.Adopt], recording the ends it missed. A sandbox paused
// to disk takes its guest's memory, and so the processes, with it:
// [Table.Suspend] stops the watching before the connection goes, so
// nothing becomes lost, and [Table.Resume] follows them again (and
// adopts what it did not know) once the sandbox runs.
package process
