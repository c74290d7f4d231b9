package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// NewHandler returns a client whose requests are served by h, the API's
// handler (apiserver.Server.Handler), in this process: no connection, no
// token. h sees each request's context, so what the caller put there
// (api.WithCaller: who asks, for the audit) reaches the handler; answers
// stream as h writes them (exec output, downloads), and closing an
// answer's body or cancelling its context cancels h's request context.
// A front living inside the daemon (the MCP server of `serve --mcp`) uses
// it to go through the same API as every other client.
func NewHandler(h http.Handler, opts ...Option) *Client {
	opts = append(opts, WithHTTPClient(&http.Client{Transport: handlerTransport{h: h}}))
	return New("", opts...)
}

// handlerTransport is an http.RoundTripper that serves each request with
// an http.Handler in a goroutine, the answer's body a pipe.
type handlerTransport struct{ h http.Handler }

// errAnswerCut is the read error of an answer whose handler aborted
// (panicked, e.g. with http.ErrAbortHandler) after it began.
var errAnswerCut = errors.New("the in-process API handler aborted its answer")

// RoundTrip implements http.RoundTripper.
func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	sreq := req.Clone(ctx)
	sreq.RequestURI = req.URL.RequestURI()
	sreq.RemoteAddr = "in-process"
	if sreq.Host == "" {
		sreq.Host = req.URL.Host
	}
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	// A client request's ContentLength 0 with a body means "unknown" (sent
	// chunked over a connection); a server request says unknown with -1
	// and means 0 bytes by 0.
	if sreq.ContentLength == 0 && sreq.Body != http.NoBody {
		sreq.ContentLength = -1
	}
	pr, pw := io.Pipe()
	// As over a connection, a cancelled request's body fails with the
	// context's error (not a clean end), whatever the handler does.
	context.AfterFunc(ctx, func() { pw.CloseWithError(context.Cause(ctx)) })
	w := &pipeWriter{header: make(http.Header), pw: pw, began: make(chan struct{})}
	go func() {
		// As http.RoundTripper requires (and a server does after its
		// handler), the request's body is closed, read or not.
		defer sreq.Body.Close()
		defer func() {
			if p := recover(); p != nil {
				err := errAnswerCut
				if p != http.ErrAbortHandler {
					err = fmt.Errorf("%w: %v", errAnswerCut, p)
				}
				w.begin(http.StatusInternalServerError)
				pw.CloseWithError(err)
				return
			}
			w.begin(http.StatusOK)
			if ctx.Err() != nil {
				pw.CloseWithError(context.Cause(ctx))
				return
			}
			pw.Close()
		}()
		t.h.ServeHTTP(w, sreq)
	}()
	select {
	case <-w.began:
	case <-ctx.Done():
		cancel()
		pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		Body:          &pipeBody{PipeReader: pr, cancel: cancel},
		ContentLength: -1,
		Request:       req,
	}, nil
}

// pipeBody is an answer's body: closing it ends the handler's request.
type pipeBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

// Close implements io.Closer.
func (b *pipeBody) Close() error {
	b.cancel()
	return b.PipeReader.Close()
}

// pipeWriter is the http.ResponseWriter of an in-process request: the
// status and a copy of the headers are handed to RoundTrip at the first
// WriteHeader, Write or Flush; the body goes through the pipe.
type pipeWriter struct {
	header http.Header
	pw     *io.PipeWriter

	once   sync.Once
	began  chan struct{}
	status int
	sent   http.Header
}

// begin hands the status and headers over, once.
func (w *pipeWriter) begin(code int) {
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.began)
	})
}

// Header implements http.ResponseWriter.
func (w *pipeWriter) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter (1xx answers are ignored).
func (w *pipeWriter) WriteHeader(code int) {
	if code >= 200 {
		w.begin(code)
	}
}

// Write implements http.ResponseWriter; it blocks until the client reads.
func (w *pipeWriter) Write(p []byte) (int, error) {
	w.begin(http.StatusOK)
	return w.pw.Write(p)
}

// Flush implements http.Flusher: the pipe holds nothing back.
func (w *pipeWriter) Flush() { w.begin(http.StatusOK) }
