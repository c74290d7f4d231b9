package procs

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// stdinChunk is how many bytes WriteStdin hands to the pipe at a time.
const stdinChunk = 32 << 10

// WriteStdin copies r to the process's stdin and, if closeAfter, then
// closes it (the command reads EOF). Concurrent writers are serialized:
// each one's bytes reach the command contiguously, in the order the
// writers got their turn. r nil writes nothing (with closeAfter: just
// close). It returns the number of bytes the command's side of the pipe
// accepted.
//
// ctx bounds the wait for the turn and for the command to read; it does
// not interrupt r.Read. When ctx ends while the command is not reading,
// WriteStdin returns the bytes accepted so far and ctx's error, and stdin
// stays open: the chunk in flight (at most 32 KiB, not counted) is still
// delivered when the command reads it, and later writers wait for that.
// When r fails, stdin stays open too and the error wraps r's.
//
// Errors: agentproto.ErrProcNotFound, agentproto.ErrProcExited (the process
// ended, also while writing), agentproto.ErrProcStdinClosed (never opened, or
// closed by an earlier closeAfter), r's error wrapped, ctx.Err() wrapped.
func (t *Table) WriteStdin(ctx context.Context, id string, r io.Reader, closeAfter bool) (int64, error) {
	e, err := t.lookup(id)
	if err != nil {
		return 0, err
	}
	if err := e.stdinUsable(); err != nil {
		return 0, err
	}
	select {
	case e.stdinSem <- struct{}{}:
	case <-e.done:
		return 0, fmt.Errorf("process %s: write stdin: %w", id, agentproto.ErrProcExited)
	case <-ctx.Done():
		return 0, fmt.Errorf("process %s: write stdin: waiting for an earlier writer: %w", id, ctx.Err())
	}
	held := true
	defer func() {
		if held {
			<-e.stdinSem
		}
	}()
	if err := e.stdinUsable(); err != nil {
		return 0, err
	}

	var n int64
	if r != nil {
		buf := make([]byte, stdinChunk)
		type result struct {
			n   int
			err error
		}
		for {
			m, rerr := r.Read(buf)
			if m > 0 {
				// The pipe write blocks until the command's side reads
				// it; a goroutine lets ctx end the wait.
				res := make(chan result, 1)
				go func(p []byte) {
					k, err := e.stdinW.Write(p)
					res <- result{k, err}
				}(buf[:m])
				select {
				case w := <-res:
					n += int64(w.n)
					if w.err != nil {
						if errors.Is(w.err, agentproto.ErrProcExited) {
							return n, fmt.Errorf("process %s: write stdin: %w", id, agentproto.ErrProcExited)
						}
						return n, fmt.Errorf("process %s: write stdin: %w", id, w.err)
					}
				case <-ctx.Done():
					held = false // the writer goroutine's turn ends with its write
					go func() {
						<-res
						<-e.stdinSem
					}()
					return n, fmt.Errorf("process %s: write stdin: %w (%d bytes were written, the next chunk is still pending)", id, ctx.Err(), n)
				}
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return n, fmt.Errorf("process %s: write stdin: read the data: %w", id, rerr)
			}
		}
	}
	if closeAfter {
		e.mu.Lock()
		open := e.stdinOpen
		e.stdinOpen = false
		e.mu.Unlock()
		if open {
			_ = e.stdinW.Close()
		}
	}
	return n, nil
}

// stdinUsable returns agentproto.ErrProcExited or
// agentproto.ErrProcStdinClosed (wrapped) when stdin takes no bytes.
func (e *entry) stdinUsable() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.state != agentproto.ProcRunning:
		return fmt.Errorf("process %s: write stdin: %w", e.id, agentproto.ErrProcExited)
	case !e.stdinOpen:
		return fmt.Errorf("process %s: write stdin: %w: start the process with stdin_open, and close stdin only with the last write", e.id, agentproto.ErrProcStdinClosed)
	}
	return nil
}
