package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewStdioTransport returns the transport of `agentbox mcp`:
// newline-delimited JSON-RPC read from in and written to out (stdin and
// stdout), as sdk.StdioTransport, except that a call the client cancelled
// (notifications/cancelled) gets no response. The MCP specification says
// that the receiver of a cancellation should not answer the cancelled
// request; the Go SDK (v1.8.0) answers every call, whatever its handler
// returns (go-sdk issues 1235 and 1259), so the transport drops the
// answer: it notes the client's calls as it reads them and which of them
// the client cancelled, and writes no response to one so marked.
// Streamable HTTP (HTTPHandler) answers a cancelled call still: there the
// answer ends the call's POST, and the client ignores it.
func NewStdioTransport(in io.ReadCloser, out io.Writer) sdk.Transport {
	f := &cancelFilter{calls: make(map[jsonrpc.ID]bool)}
	return &sdk.IOTransport{
		Reader: &filterReader{br: bufio.NewReaderSize(in, 64<<10), in: in, f: f},
		Writer: &filterWriter{w: out, f: f},
	}
}

// cancelFilter is what NewStdioTransport's reader and writer share: the
// client's calls not answered yet, each with whether it was cancelled.
type cancelFilter struct {
	mu    sync.Mutex
	calls map[jsonrpc.ID]bool
}

// notificationCancelled is the method of the MCP cancellation.
const notificationCancelled = "notifications/cancelled"

// read notes the calls and cancellations of line, one message or a batch
// read from the client.
func (f *cancelFilter) read(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	if line[0] != '[' {
		f.readMessage(line)
		return
	}
	var batch []json.RawMessage
	if json.Unmarshal(line, &batch) == nil {
		for _, m := range batch {
			f.readMessage(m)
		}
	}
}

// readMessage notes the message b: a call (a method and an ID) as
// unanswered, a cancellation of an unanswered call as cancelled. What
// does not decode is the SDK's to refuse.
func (f *cancelFilter) readMessage(b []byte) {
	var m struct {
		ID     *any   `json:"id"`
		Method string `json:"method"`
	}
	if json.Unmarshal(b, &m) != nil || m.Method == "" {
		return
	}
	if m.ID != nil {
		if id, err := jsonrpc.MakeID(*m.ID); err == nil {
			f.mu.Lock()
			f.calls[id] = false
			f.mu.Unlock()
		}
		return
	}
	if m.Method != notificationCancelled {
		return
	}
	var n struct {
		Params struct {
			RequestID any `json:"requestId"`
		} `json:"params"`
	}
	if json.Unmarshal(b, &n) != nil {
		return
	}
	id, err := jsonrpc.MakeID(n.Params.RequestID)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.calls[id]; ok { // else answered already
		f.calls[id] = true
	}
}

// drop reports whether line, a message to the client, is the response to
// a cancelled call; a response ends its call either way.
func (f *cancelFilter) drop(line []byte) bool {
	id, ok := responseID(line)
	if !ok {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cancelled := f.calls[id]
	delete(f.calls, id)
	return cancelled
}

// responseID returns the ID of line when it is one response (it has an
// id and a result or an error, and no method). It reads the object's
// keys in order and stops at the answer once it has the ID: the SDK
// writes "jsonrpc" and "id" first, so the result (a file's content, a
// command's output) is not scanned.
func responseID(line []byte) (jsonrpc.ID, bool) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return jsonrpc.ID{}, false // a batch (older protocols) passes as it is
	}
	var (
		raw            any
		haveID, answer bool
		skip           json.RawMessage
	)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return jsonrpc.ID{}, false
		}
		switch key, _ := t.(string); key {
		case "method":
			return jsonrpc.ID{}, false // a request or notification of the server's
		case "id":
			if dec.Decode(&raw) != nil {
				return jsonrpc.ID{}, false
			}
			haveID = true
		case "result", "error":
			answer = true
			if haveID {
				id, err := jsonrpc.MakeID(raw)
				return id, err == nil
			}
			fallthrough
		default:
			if dec.Decode(&skip) != nil {
				return jsonrpc.ID{}, false
			}
		}
	}
	if !haveID || !answer {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(raw)
	return id, err == nil
}

// filterReader reads in line by line for the SDK, showing each line to
// the filter first. A line longer than its buffer (a large write_file) is
// passed on unread by the filter: it is no call's cancellation, and a
// call whose start it missed is answered as usual.
type filterReader struct {
	br      *bufio.Reader
	in      io.Closer
	f       *cancelFilter
	pending []byte // the rest of the line read last
	long    bool   // within a line longer than br's buffer
	err     error  // the read error, returned once pending is given
}

// Read implements io.Reader.
func (r *filterReader) Read(p []byte) (int, error) {
	if len(r.pending) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		line, err := r.br.ReadSlice('\n')
		start := !r.long
		r.long = errors.Is(err, bufio.ErrBufferFull)
		if start && !r.long && len(line) > 0 {
			r.f.read(line)
		}
		if err != nil && !r.long {
			r.err = err
		}
		if len(line) == 0 {
			return 0, r.err
		}
		r.pending = line // valid until the next ReadSlice, after it is given
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// Close implements io.Closer: it closes in.
func (r *filterReader) Close() error { return r.in.Close() }

// filterWriter writes the SDK's messages, one per Write, to w, but for
// the responses to cancelled calls.
type filterWriter struct {
	w io.Writer
	f *cancelFilter
}

// Write implements io.Writer.
func (w *filterWriter) Write(p []byte) (int, error) {
	if w.f.drop(p) {
		return len(p), nil
	}
	return w.w.Write(p)
}

// Close implements io.Closer; out stays open (as stdout for
// sdk.StdioTransport).
func (w *filterWriter) Close() error { return nil }
