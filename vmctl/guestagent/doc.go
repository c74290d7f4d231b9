// Package guestagent is the guest side of the agentbox agent protocol
// (vmctl/agentproto), as a library so that it can be tested on the host.
//
// [Serve] handles one host session on a byte stream: the handshake, then a
// yamux server with one goroutine per stream (exec, file operations, ping,
// settime, shutdown). [ServePort] runs sessions one after another on a
// virtio-serial port, whose quirks it absorbs: reads return EOF while no host
// is connected, and the port must stay open across host connections.
// [FindPort] locates the port without udev.
//
// Child processes are started with syscall.ForkExec in their own process
// group and waited for by a process-wide reaper (see [StartReaper]) that
// also reaps orphans, so the agent can run as PID 1 or as a child
// subreaper. Nothing in this package uses os/exec's Wait; the embedding
// program must not either.
//
// The package is Linux-only.
package guestagent
