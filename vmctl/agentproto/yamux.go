package agentproto

import (
	"io"
	"time"

	"github.com/hashicorp/yamux"
)

// StreamWindow is the yamux per-stream receive window in bytes (4 MiB).
// Larger than yamux's 256 KiB default so that one stream can keep a slow,
// high-latency virtio-serial link busy.
const StreamWindow = 4 << 20

// WriteTimeout is yamux's ConnectionWriteTimeout for both sides: how long
// one frame (a stream's write, a window update, a ping's answer) may wait
// to be written before its writer gives up with
// yamux.ErrConnectionWriteTimeout (the session stays up). It was unbounded
// until issue 24: a peer that stops reading pinned every writer of the
// other side for ever. Two minutes is far longer than a guest is paused
// for a snapshot save; a guest paused longer (a debugger) sees the
// operations that wrote to it fail, not the session.
const WriteTimeout = 2 * time.Minute

// YamuxConfig returns the yamux configuration both sides must use.
//
// Keepalives are disabled and the open timeout removed: a guest may be
// paused (for a snapshot, or by a debugger) for a long time, and that must
// not tear the session down; writes wait at most [WriteTimeout]. Callers
// bound their operations with contexts. Logging of yamux is discarded;
// errors surface through the session and stream methods. The host wraps
// its connection in [GuardHost] so that what the guest sends is bounded.
func YamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.MaxStreamWindowSize = StreamWindow
	c.ConnectionWriteTimeout = WriteTimeout
	c.StreamOpenTimeout = 0
	c.LogOutput = io.Discard
	return c
}
