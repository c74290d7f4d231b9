package procs

import (
	"context"
	"fmt"
	"sort"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// Stream names of Chunk.Stream; they equal api.EventStdout and
// api.EventStderr.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// maxChunk is the largest Chunk the buffer holds: consecutive writes to the
// same stream are merged up to it, larger writes split.
const maxChunk = agentproto.ChunkSize

// Chunk is a piece of a process's output.
type Chunk struct {
	// Stream is StreamStdout or StreamStderr.
	Stream string
	// Offset is the position of Data in the process's combined output, in
	// bytes: stdout and stderr share one offset space in the order the
	// bytes arrived, so chunk after chunk the offsets are contiguous.
	Offset int64
	// Data is at most 64 KiB (agentproto.ChunkSize) of output. It is
	// shared with the buffer: read it or copy it, never modify it.
	Data []byte
}

// chunk is a buffered Chunk.
type chunk struct {
	stream string
	off    int64
	data   []byte
}

// buffer keeps the last limit bytes of a process's combined output. It is
// guarded by its entry's mu. Bytes already handed out are never written
// again: merging appends after a chunk's end, dropping re-slices its start.
type buffer struct {
	chunks  []chunk
	total   int64         // bytes produced
	kept    int64         // bytes in chunks; total-kept were dropped
	changed chan struct{} // closed on the next change if watched
	watched bool
}

// streamWriter is the io.Writer a command's stdout or stderr goes to.
type streamWriter struct {
	e      *entry
	stream string
}

// Write appends b to the process's output and never fails; bytes that
// arrive after the process was marked ended are discarded.
func (w streamWriter) Write(b []byte) (int, error) {
	e := w.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state == agentproto.ProcRunning && len(b) > 0 {
		e.out.append(w.stream, b, e.limit)
		e.out.broadcast()
	}
	return len(b), nil
}

// append adds b to stream's output and drops the oldest bytes beyond
// limit.
func (b *buffer) append(stream string, p []byte, limit int64) {
	for len(p) > 0 {
		var k int
		if n := len(b.chunks); n > 0 && b.chunks[n-1].stream == stream && len(b.chunks[n-1].data) < maxChunk {
			last := &b.chunks[n-1]
			k = min(len(p), maxChunk-len(last.data))
			last.data = append(last.data, p[:k]...)
		} else {
			k = min(len(p), maxChunk)
			b.chunks = append(b.chunks, chunk{stream: stream, off: b.total, data: append([]byte(nil), p[:k]...)})
		}
		b.total += int64(k)
		b.kept += int64(k)
		p = p[k:]
	}
	for b.kept > limit {
		excess := b.kept - limit
		first := &b.chunks[0]
		if n := int64(len(first.data)); n <= excess {
			b.kept -= n
			b.chunks[0] = chunk{} // release its bytes
			b.chunks = b.chunks[1:]
			continue
		}
		first.data = first.data[excess:]
		first.off += excess
		b.kept -= excess
	}
}

// broadcast wakes every follower waiting on the current change channel.
func (b *buffer) broadcast() {
	if b.watched {
		close(b.changed)
		b.watched = false
	}
}

// watch returns a channel closed at the next change (output or end).
func (b *buffer) watch() <-chan struct{} {
	if !b.watched {
		b.changed = make(chan struct{})
		b.watched = true
	}
	return b.changed
}

// from returns the buffered output from offset next on, the first chunk
// trimmed to start exactly at next. Data slices are capped at their
// length so that a consumer's append cannot reach the buffer's bytes.
func (b *buffer) from(next int64) []Chunk {
	i := sort.Search(len(b.chunks), func(i int) bool {
		return b.chunks[i].off+int64(len(b.chunks[i].data)) > next
	})
	if i == len(b.chunks) {
		return nil
	}
	out := make([]Chunk, 0, len(b.chunks)-i)
	for _, c := range b.chunks[i:] {
		d, off := c.data, c.off
		if off < next {
			d, off = d[next-off:], next
		}
		out = append(out, Chunk{Stream: c.stream, Offset: off, Data: d[:len(d):len(d)]})
	}
	return out
}

// Output passes the process's output from byte offset on (a negative
// offset counts as 0) to emit, in order and exactly once each byte: every
// buffered chunk that ends after offset, the first one trimmed to start at
// offset. emit runs without locks held and may block (a slow HTTP client
// only delays its own stream); it must not modify Data.
//
// Without follow Output returns after what is buffered now. With follow it
// then waits for more output and passes it on, until the process ended
// and all its output was passed, or ctx is done.
//
// The ProcInfo returned is the snapshot taken with the last batch of chunks
// passed: when its State is not running, every output byte up to
// ProcInfo.OutputBytes was passed, so the caller can send the "exit" event from
// it. It is also returned with the errors below, except
// agentproto.ErrProcNotFound.
//
// Errors: agentproto.ErrProcNotFound; a *agentproto.ProcDroppedError
// (errors.Is agentproto.ErrProcDropped) when offset, or a follower that fell
// behind by more than the buffer, is below ProcInfo.OutputDropped (chunks before
// it were passed already); emit's error as is; ctx.Err() wrapped.
func (t *Table) Output(ctx context.Context, id string, offset int64, follow bool, emit func(Chunk) error) (agentproto.ProcInfo, error) {
	e, err := t.lookup(id)
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	next := max(offset, 0)
	for {
		e.mu.Lock()
		info := e.infoLocked()
		if dropped := e.out.total - e.out.kept; next < dropped {
			e.mu.Unlock()
			return info, &agentproto.ProcDroppedError{ID: id, Offset: next, Dropped: dropped, Kept: int(e.limit)}
		}
		batch := e.out.from(next)
		var wake <-chan struct{}
		if follow && info.State == agentproto.ProcRunning {
			wake = e.out.watch()
		}
		e.mu.Unlock()

		for _, c := range batch {
			if err := emit(c); err != nil {
				return info, err
			}
			next = c.Offset + int64(len(c.Data))
		}
		if wake == nil {
			return info, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return info, fmt.Errorf("process %s: follow output: %w", id, ctx.Err())
		}
	}
}
