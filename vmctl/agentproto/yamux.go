package agentproto

import (
	"io"
	"math"
	"time"

	"github.com/hashicorp/yamux"
)

// StreamWindow is the yamux per-stream receive window in bytes (4 MiB).
// Larger than yamux's 256 KiB default so that one stream can keep a slow,
// high-latency virtio-serial link busy.
const StreamWindow = 4 << 20

// YamuxConfig returns the yamux configuration both sides must use.
//
// Keepalives are disabled and write/open timeouts are effectively removed:
// a guest may be paused (for a snapshot, or by a debugger) for an unbounded
// time, and that must not tear the session down. Callers bound their
// operations with contexts instead. Logging of yamux is discarded; errors
// surface through the session and stream methods.
func YamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.MaxStreamWindowSize = StreamWindow
	c.ConnectionWriteTimeout = time.Duration(math.MaxInt64)
	c.StreamOpenTimeout = 0
	c.LogOutput = io.Discard
	return c
}
