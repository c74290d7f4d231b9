// Package process keeps the detached processes of one sandbox: commands
// started in the guest that outlive the request that started them
// (E2B/Daytona-style background commands). The daemon holds one [Table]
// per sandbox and maps the package's sentinel errors to API errors.
//
// A process is started with [Table.Start] under an id the caller chooses
// (the exec id), and returns at once. From then on the table:
//
//   - buffers its stdout and stderr together, in arrival order, in one
//     offset space ([Chunk.Offset]), keeping the last Options.BufferBytes
//     (8 MiB) and counting what fell out (Info.OutputDropped);
//   - serves that output from any offset still buffered, optionally
//     following it until the process ends ([Table.Output]), to any number
//     of concurrent readers;
//   - feeds its stdin through a pipe when it was started with stdinOpen
//     ([Table.WriteStdin], closeAfter for EOF), serializing writers;
//   - signals its process group ([Table.Signal]);
//   - records how it ended ([Info.State]: running, exited with an
//     agentproto.ExitStatus, or lost when its agent connection ended
//     first) and calls Options.OnExit once, for the audit log and exec
//     history.
//
// The table keeps at most Options.MaxProcesses (256) processes; the oldest
// ended ones are forgotten to make room, and starts are refused with
// [ErrTooMany] when all of them still run.
//
// Lifetimes: a command's life is bound to the context passed to Start,
// which must be the sandbox's lifetime context, never an HTTP request's.
// Requests only bound their own waits: a cancelled Output stops following,
// a cancelled WriteStdin returns without closing stdin. [Table.CloseAll]
// ends everything when the sandbox goes away.
//
// Commands are started through a [StartFunc]; [AgentStart] makes one of an
// agent.Client or a sandbox (an [AgentStarter]), and tests use fakes.
package process
