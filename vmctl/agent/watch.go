package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Watcher is a running watch of a guest path, started by Client.Watch.
// It is not safe for concurrent use, except Close.
type Watcher struct {
	o       *op
	started agentproto.WatchStarted
	err     error
	closed  atomic.Bool
}

// ErrWatchClosed is returned by Watcher.Next after Close.
var ErrWatchClosed = errdefs.New(errdefs.ErrCanceled, "", "agent: watch closed")

// Watch starts watching the guest path of req (absolute; a directory, or
// a file) and returns once the guest has the watch in place: every change
// made after it returned is reported by Next. ctx bounds the watch's whole
// life; Close ends it earlier and must be called in any case (it is what
// tells the guest to drop the watch).
//
// Errors: *agentproto.Error with CodeNotFound (the path does not exist),
// CodeInvalid (relative path), CodePermission, CodeIO (e.g. the guest's
// inotify limits); ErrDisconnected; ctx.Err().
func (c *Client) Watch(ctx context.Context, req agentproto.WatchRequest) (*Watcher, error) {
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("agent: watch: %w", err)
	}
	o, err := c.open(ctx, "watch "+req.Path, &agentproto.Request{Op: agentproto.OpWatch, Watch: &req})
	if err != nil {
		return nil, err
	}
	w := &Watcher{o: o}
	if err := o.fr.ReadJSON(agentproto.FrameResponse, &w.started); err != nil {
		o.close()
		return nil, o.err(err)
	}
	return w, nil
}

// Dirs is the number of directories the guest watches (WatchStarted).
func (w *Watcher) Dirs() int { return w.started.Dirs }

// Next returns the next batch of events (at least one), in the order the
// guest saw them, waiting for it. It returns io.EOF once the watched path
// itself was removed or moved (after the batch reporting it); an error
// wrapping ctx.Err() when the watch's ctx ended; ErrDisconnected; a guest
// *agentproto.Error when the guest could not go on watching. After an
// error every call returns it.
func (w *Watcher) Next() ([]agentproto.WatchEvent, error) {
	if w.err != nil {
		return nil, w.err
	}
	for {
		if w.closed.Load() {
			w.err = ErrWatchClosed // also with frames still buffered
			return nil, w.err
		}
		t, b, err := w.o.fr.ReadFrame()
		if err != nil && w.closed.Load() {
			w.err = ErrWatchClosed
			return nil, w.err
		}
		if err != nil {
			w.err = w.o.err(err)
			return nil, w.err
		}
		switch t {
		case agentproto.FrameData:
			var batch []agentproto.WatchEvent
			if err := json.Unmarshal(b, &batch); err != nil {
				w.err = w.o.err(fmt.Errorf("decode watch events: %w", err))
				return nil, w.err
			}
			if len(batch) > 0 {
				return batch, nil
			}
		case agentproto.FrameDataEnd:
			w.err = io.EOF
			return nil, w.err
		default:
			w.err = w.o.err(agentproto.DecodeFrame(t, b, agentproto.FrameData, nil))
			return nil, w.err
		}
	}
}

// Close ends the watch: the guest removes it. It is idempotent and
// returns nil; a pending Next returns ErrWatchClosed.
func (w *Watcher) Close() error {
	w.closed.Store(true)
	_ = w.o.st.SetReadDeadline(time.Unix(1, 0))
	w.o.close()
	return nil
}
