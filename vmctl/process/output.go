package process

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// Stream names of Chunk.Stream; they equal api.EventStdout and
// api.EventStderr.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// Chunk is a piece of a process's output.
type Chunk struct {
	// Stream is StreamStdout or StreamStderr.
	Stream string
	// Offset is the position of Data in the process's combined output, in
	// bytes: stdout and stderr share one offset space in the order the
	// bytes arrived, so chunk after chunk the offsets are contiguous.
	Offset int64
	// Data is at most 64 KiB (agentproto.ChunkSize) of output, valid only
	// during the emit call.
	Data []byte
}

// Output passes the process's output from byte offset on (a negative
// offset counts as 0), as the guest keeps it, to emit, in order and
// exactly once each byte: every kept chunk that ends after offset, the
// first one trimmed to start at offset. emit may block (a slow HTTP
// client slows its own stream, and the guest's sending of it, only).
//
// Without follow Output returns after what the guest keeps now. With
// follow it then waits for more output and passes it on, until the
// process ended and all its output was passed, or ctx is done.
//
// The Info returned is the snapshot taken with the last chunk passed:
// when its State is not running, every output byte up to
// Info.OutputBytes was passed and OnExit has run, so the caller can send
// the "exit" event from it. It is also returned with a *DroppedError.
//
// Errors: ErrNotFound; a *DroppedError (errors.Is ErrDropped) when offset,
// or a follower that fell behind by more than the guest's ring, is below
// Info.OutputDropped (chunks before it were passed already); emit's error
// as is; the guest's error wrapped (the output lives in the guest: it is
// gone with a stopped sandbox); ctx.Err() wrapped.
func (t *Table) Output(ctx context.Context, id string, offset int64, follow bool, emit func(Chunk) error) (Info, error) {
	e, err := t.lookup(id)
	if err != nil {
		return Info{}, err
	}
	var emitErr error
	end, err := t.g.ProcessOutput(ctx, id, max(offset, 0), follow, func(c agentproto.ProcChunk) error {
		stream := StreamStdout
		if c.Stream == agentproto.ProcStderr {
			stream = StreamStderr
		}
		if err := emit(Chunk{Stream: stream, Offset: c.Offset, Data: c.Data[:len(c.Data):len(c.Data)]}); err != nil {
			emitErr = err
			return err
		}
		return nil
	})
	switch {
	case emitErr != nil && errors.Is(err, emitErr):
		return e.info(), emitErr
	case err != nil && ctx.Err() != nil:
		return e.info(), fmt.Errorf("process %s: follow output: %w", id, ctx.Err())
	case err != nil:
		return e.info(), fmt.Errorf("process %s: output: %w", id, agentproto.ProcSentinel(err))
	}
	info := e.update(ctx, end.Info)
	if info.State == StateRunning && end.Info.State != agentproto.ProcRunning {
		// ctx ended while OnExit ran: show the guest's view.
		info = e.fromGuest(end.Info)
	}
	if end.Dropped {
		return info, &DroppedError{ID: id, Offset: end.Next, Dropped: end.Info.OutputDropped, Kept: agentproto.ProcRingBytes}
	}
	return info, nil
}
