package mcp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// capture keeps a bounded view of one output stream: its first limit/2
// bytes and its last limit-limit/2, counting all it was given. Safe for
// concurrent use (progress reads it while the exec writes).
type capture struct {
	mu      sync.Mutex
	headCap int
	tailCap int
	head    []byte
	tail    []byte // the newest bytes after head; trimmed to tailCap when read
	total   int64
}

// newCapture returns a capture of at most limit bytes.
func newCapture(limit int) *capture {
	return &capture{headCap: limit / 2, tailCap: limit - limit/2}
}

// Write implements io.Writer; it never fails.
func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	rest := p
	if n := c.headCap - len(c.head); n > 0 {
		n = min(n, len(rest))
		c.head = append(c.head, rest[:n]...)
		rest = rest[n:]
	}
	c.tail = append(c.tail, rest...)
	if len(c.tail) > 2*c.tailCap+4096 {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-c.tailCap:]...)
	}
	return len(p), nil
}

// Total returns how many bytes were written.
func (c *capture) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Result returns the text kept and how many bytes were cut from its
// middle. When bytes were cut, the text has a line in their place saying
// how many (preceded by a line break only when the head does not end with
// one), and the cut is widened to whole UTF-8 characters.
func (c *capture) Result(stream string) (text string, cut int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The tail holds up to about twice tailCap between trims: what fits
	// the limit is decided by the total, not by what happens to be held.
	if c.total <= int64(c.headCap+c.tailCap) {
		return string(c.head) + string(c.tail), 0
	}
	head, tail := c.head, c.tail
	if len(tail) > c.tailCap {
		tail = tail[len(tail)-c.tailCap:]
	}
	// Whole characters only: drop a character cut in two at either edge.
	if i := len(head) - 1; i >= 0 {
		for j := 0; j < utf8.UTFMax-1 && i > 0 && !utf8.RuneStart(head[i]); j++ {
			i--
		}
		if !utf8.FullRune(head[i:]) {
			head = head[:i]
		}
	}
	for i := 0; i < utf8.UTFMax && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
		tail = tail[1:]
	}
	cut = c.total - int64(len(head)) - int64(len(tail))
	// The note is a line of its own, whatever the stream: a line break
	// before it only when the head does not end one.
	note := fmt.Sprintf("[agentbox: %d bytes cut from the middle of %s, which was %d bytes: the first %d and the last %d are shown]\n",
		cut, stream, c.total, len(head), len(tail))
	if len(head) > 0 && head[len(head)-1] != '\n' {
		note = "\n" + note
	}
	return string(head) + note + string(tail), cut
}

// errBudget ends a read of process output whose budget is spent.
var errBudget = errors.New("output budget spent")

// budget counts the bytes of two streams against one limit: a write past
// it is cut to what fits and fails with errBudget.
type budget struct {
	left int
	got  int64
}

// writer returns an io.Writer of the budget appending to *dst.
func (b *budget) writer(dst *[]byte) writerFunc {
	return func(p []byte) (int, error) {
		n := min(len(p), b.left)
		*dst = append(*dst, p[:n]...)
		b.left -= n
		b.got += int64(n)
		if n < len(p) {
			return n, errBudget
		}
		return n, nil
	}
}

// writerFunc is an io.Writer made of a function.
type writerFunc func(p []byte) (int, error)

// Write implements io.Writer.
func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// progress sends progress notifications for req every interval while the
// returned stop is not called, when the client asked for them (a progress
// token); message says what there is to say. stop waits for the sender.
func progress(ctx context.Context, req *sdk.CallToolRequest, interval time.Duration, message func(elapsed time.Duration) string) (stop func()) {
	if req == nil || req.Session == nil || req.Params == nil {
		return func() {}
	}
	tok := req.Params.GetProgressToken()
	if tok == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// The count goes up by one each time, as the protocol asks;
			// the message says what happened.
			req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
				ProgressToken: tok,
				Progress:      float64(n),
				Message:       message(time.Since(start)),
			})
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
