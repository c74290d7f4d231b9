// Package agentproto is the wire protocol between the agentbox host and the
// guest agent (agentbox-guest) running inside a VM.
//
// The transport is a virtio-serial port: a raw, ordered byte stream that
// outlives individual host connections. A session on it has three layers:
//
//  1. A line-based handshake (see [ClientHandshake] and [AcceptHello]). The
//     host writes "AGENTBOX/<version> HELLO <nonce>\n"; the guest discards
//     anything before the magic (stale bytes of an earlier session) and
//     answers "AGENTBOX/<version> OK <nonce> <agent-version>\n", or
//     "AGENTBOX/<version> ERR <nonce> <message>\n". The host likewise skips
//     every line that does not carry its nonce. Both scans are bounded by
//     [MaxHandshakeScan] bytes.
//  2. A hashicorp/yamux session configured by [YamuxConfig]; the host is the
//     yamux client and the guest the server. The host reads the guest
//     through [GuardHost], which checks every yamux frame header (no
//     stream opened by the guest, few unanswered pings, sane sizes) and
//     ends the session with [ErrProtocolViolation] at the first that is
//     not.
//  3. One yamux stream per operation, opened by the host, carrying frames
//     "[type uint8][length uint32 big-endian][payload]" (see [WriteFrame] and
//     [Reader]). The first frame is always a [FrameRequest] whose JSON payload
//     is a [Request]; the rest of the exchange depends on [Request.Op] and is
//     described on each [Op] constant.
//
// The package is a leaf: it imports nothing else of agentbox but
// vmctl/errdefs (standard library only: the categories its sentinels
// wrap), so both the host client (vmctl/agent) and the guest
// (vmctl/guestagent) depend on it.
package agentproto

// ProtocolVersion is the version of this protocol, carried in the handshake.
// Host and guest must speak the same version; any incompatible change to the
// frames or messages below must increment it. Version 2 added terminals
// (ExecRequest.Tty, FrameResize), detached processes kept by the agent
// (proc-* operations, FrameProcOutput), forwarded connections (connect),
// watches and reseeding: a version 1 agent would kill detached processes
// with its session, so a host refuses it and says to rebuild the image.
// Version 3 added named users (ExecRequest.User, the owner of written
// files and directories, owner and group names in file info) and the move
// operation: a version 2 agent would ignore the user and run the command,
// or write the file, as root.
const ProtocolVersion = 3
