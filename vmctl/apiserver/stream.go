package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/agentbox/agentbox/vmctl/api"
)

// maxChunk is the most output bytes one stdout/stderr event carries; a
// bigger write becomes several events, so no line gets huge.
const maxChunk = 64 << 10

// ndjsonStream writes one JSON value per line and flushes after each. The
// 200 and its headers go out with the first value, so an error before it
// can still be answered with its own status. Safe for concurrent use
// (stdout and stderr may be written from different goroutines).
type ndjsonStream struct {
	w   http.ResponseWriter
	mu  sync.Mutex
	enc *json.Encoder
	// begun says the 200 went out; err is the first write error, after
	// which every send fails with it.
	begun bool
	err   error
	// offset counts the output bytes sent (attached exec).
	offset int64
}

func newNDJSONStream(w http.ResponseWriter) *ndjsonStream {
	return &ndjsonStream{w: w, enc: json.NewEncoder(w)}
}

// begin sends the 200 and the headers, if not yet; call with mu held.
func (st *ndjsonStream) begin() {
	if st.begun {
		return
	}
	st.begun = true
	h := st.w.Header()
	h.Set("Content-Type", api.ContentTypeNDJSON)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	st.w.WriteHeader(http.StatusOK)
}

// start sends the headers and flushes them, for streams that may wait long
// for their first value.
func (st *ndjsonStream) start() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.begin()
	return st.flush()
}

// send writes v as one line and flushes it.
func (st *ndjsonStream) send(v any) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.sendLocked(v)
}

func (st *ndjsonStream) sendLocked(v any) error {
	if st.err != nil {
		return st.err
	}
	st.begin()
	if err := st.enc.Encode(v); err != nil {
		st.err = err
		return err
	}
	return st.flush()
}

func (st *ndjsonStream) flush() error {
	if err := http.NewResponseController(st.w).Flush(); err != nil {
		st.err = err
		return err
	}
	return nil
}

// started reports whether the 200 went out.
func (st *ndjsonStream) started() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.begun
}

// endFollow ends a stream that follows something until the client goes
// or Shutdown starts (its backend call ran under untilDrain), after that
// call returned err. Without an error, and when Shutdown cut it, the
// stream ends cleanly (the 200 goes out now if nothing did: resume with
// the route's offset). An error before the first value is an ordinary
// error answer with its status, as is one because the client went (there
// is nobody to answer); any other error after it is sent as the event
// errorEvent makes of it, the stream's last.
func (s *Server) endFollow(r *request, st *ndjsonStream, route string, err error, errorEvent func(*api.Error) any) error {
	switch {
	case err == nil:
	case s.drain.Err() != nil && r.Context().Err() == nil && errors.Is(err, context.Canceled):
		// Shutting down: end the stream cleanly below.
	case !st.started(), clientGone(r.Request, err):
		return err
	default:
		st.send(errorEvent(s.apiError(r.Request, route, err)))
		return nil
	}
	if !st.started() {
		return st.start()
	}
	return nil
}

// output is an io.Writer that turns writes into typ ("stdout"/"stderr")
// events of at most maxChunk bytes, with their offset in the combined
// output.
type output struct {
	st  *ndjsonStream
	typ string
}

func (o output) Write(p []byte) (int, error) {
	o.st.mu.Lock()
	defer o.st.mu.Unlock()
	n := 0
	for len(p) > 0 {
		c := min(len(p), maxChunk)
		if err := o.st.sendLocked(api.ExecEvent{Type: o.typ, Data: p[:c], Offset: o.st.offset}); err != nil {
			return n, err
		}
		o.st.offset += int64(c)
		n += c
		p = p[c:]
	}
	return n, nil
}

// lazyBody is an io.Writer for raw answers (console, download): the 200
// and the headers set by header go out with the first write.
type lazyBody struct {
	w      http.ResponseWriter
	header func(http.Header)
	begun  bool
}

func (b *lazyBody) Write(p []byte) (int, error) {
	b.begin()
	return b.w.Write(p)
}

func (b *lazyBody) begin() {
	if b.begun {
		return
	}
	b.begun = true
	b.header(b.w.Header())
	b.w.WriteHeader(http.StatusOK)
}
