// Package procs is the guest agent's registry of detached processes:
// commands that outlive the host session that started them (and the host
// daemon), each with a bounded ring of its output, its stdin and its exit
// status. The guest agent holds one [Table] for its whole life and serves
// it through the agentproto proc-* operations; vmctl/process is the host's
// view of it.
//
// A process is started with [Table.Start] under an id the host chooses
// (the exec id), and returns at once. From then on the table:
//
//   - keeps its stdout and stderr together, in arrival order, in one
//     offset space ([Chunk.Offset]), keeping the last Options.BufferBytes
//     and counting what fell out (agentproto.ProcInfo.OutputDropped);
//   - serves that output from any offset still kept, optionally following
//     it until the process ends ([Table.Output]), to any number of
//     concurrent readers;
//   - feeds its stdin through a pipe when it was started with stdinOpen
//     ([Table.WriteStdin], closeAfter for EOF), serializing writers;
//   - signals its process group ([Table.Signal]);
//   - records how it ended (agentproto.ProcInfo.State: running, exited
//     with an agentproto.ExitStatus, or lost when its Wait failed) and
//     calls Options.OnExit once;
//   - forgets it on request ([Table.Forget]) or, to make room, when it is
//     the oldest ended one.
//
// The table keeps at most Options.MaxProcesses processes; starts are
// refused with [agentproto.ErrProcLimit] when all of them still run.
//
// Lifetimes: a command's life is bound to the context passed to Start,
// which must be the agent's lifetime context, never a host session's.
// Requests only bound their own waits: a cancelled Output stops following,
// a cancelled WriteStdin returns without closing stdin. [Table.CloseAll]
// ends everything.
//
// Commands are started through a [StartFunc]; the guest agent's starts
// local commands, tests use fakes. The package is platform independent.
package procs
