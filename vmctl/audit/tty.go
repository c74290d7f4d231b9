package audit

import (
	"sync"
	"time"
)

// Directions of a TtyChunk.
const (
	TtyInput  = "in"     // bytes the caller typed (the terminal's input)
	TtyOutput = "out"    // bytes the command wrote to the terminal
	TtyResize = "resize" // the terminal was resized to Rows x Cols
)

// Bounds of a recorded terminal session (TtyRecorder).
const (
	// TtyInputBytes is the most typed input a session keeps by default:
	// the first KiB, as an OutputDigest's head (the Stdin digest still
	// covers all of it). `agentbox serve --audit-full-tty` keeps up to
	// TtyMaxBytes.
	TtyInputBytes = HeadBytes
	// TtyMaxBytes bounds what a session keeps of each direction: 1 MiB,
	// counting each chunk's data plus TtyChunkOverhead. Beyond it chunks
	// are dropped and the session says it is truncated.
	TtyMaxBytes = 1 << 20
	// TtyChunkOverhead is what each chunk counts against the bounds
	// besides its data, for the JSON around it: a stream of single
	// keystrokes cannot grow an entry beyond the bound either.
	TtyChunkOverhead = 32
	// ttyMergeWindow: a chunk written within this time of the previous
	// one in the same direction is appended to it.
	ttyMergeWindow = 10 * time.Millisecond
)

// TtySession records a command that ran on a terminal (an interactive
// exec with a tty) so that `agentbox audit --replay` can play it back:
// the terminal's initial size and the input, output and resizes as timed
// chunks, bounded by TtyMaxBytes per direction.
type TtySession struct {
	// Rows and Cols are the terminal's size when the command started.
	Rows int `json:"rows"`
	Cols int `json:"cols"`
	// Chunks are the session in order.
	Chunks []TtyChunk `json:"chunks"`
	// InputTruncated says typed input beyond the kept part was dropped
	// (by default all after the first TtyInputBytes).
	InputTruncated bool `json:"input_truncated,omitempty"`
	// OutputTruncated says output beyond TtyMaxBytes was dropped.
	OutputTruncated bool `json:"output_truncated,omitempty"`
}

// TtyChunk is one piece of a TtySession.
type TtyChunk struct {
	// Ms is when it happened, in milliseconds since the command started.
	Ms int64 `json:"ms"`
	// Dir is TtyInput, TtyOutput or TtyResize.
	Dir string `json:"dir"`
	// Data holds the bytes (input and output; base64 in JSON), exactly as
	// they passed.
	Data []byte `json:"data,omitempty"`
	// Rows and Cols are the new size (resize).
	Rows int `json:"rows,omitempty"`
	Cols int `json:"cols,omitempty"`
}

// TtyRecorder builds a TtySession as the session runs. It is safe for
// concurrent use (input, output and resizes come from different
// goroutines).
type TtyRecorder struct {
	mu       sync.Mutex
	start    time.Time
	s        TtySession
	inMax    int
	in, out  int // bytes counted against the bounds
	lastIdx  [2]int
	lastTime [2]time.Time
}

// NewTtyRecorder starts recording a session on a rows x cols terminal,
// now. fullInput keeps typed input up to TtyMaxBytes instead of the first
// TtyInputBytes.
func NewTtyRecorder(rows, cols int, fullInput bool) *TtyRecorder {
	r := &TtyRecorder{start: time.Now(), s: TtySession{Rows: rows, Cols: cols, Chunks: []TtyChunk{}}, inMax: TtyInputBytes, lastIdx: [2]int{-1, -1}}
	if fullInput {
		r.inMax = TtyMaxBytes
	}
	return r
}

// Input records typed bytes; they are copied.
func (r *TtyRecorder) Input(p []byte) { r.add(0, p) }

// Output records bytes the command wrote; they are copied.
func (r *TtyRecorder) Output(p []byte) { r.add(1, p) }

// add records p in direction d (0 input, 1 output), within the bounds:
// the default input bound keeps a prefix of the first TtyInputBytes typed
// bytes; beyond a bound the rest is dropped.
func (r *TtyRecorder) add(d int, p []byte) {
	if len(p) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	used, max, trunc, dir := &r.in, r.inMax, &r.s.InputTruncated, TtyInput
	if d == 1 {
		used, max, trunc, dir = &r.out, TtyMaxBytes, &r.s.OutputTruncated, TtyOutput
	}
	if *trunc {
		return
	}
	merge := r.lastIdx[d] >= 0 && r.lastIdx[d] == len(r.s.Chunks)-1 && now.Sub(r.lastTime[d]) < ttyMergeWindow
	room := max - *used
	if !merge {
		room -= TtyChunkOverhead
	}
	if room < len(p) {
		*trunc = true
		if d == 0 && room > 0 {
			p = p[:room] // the first bytes typed are kept whole
		} else {
			return
		}
	}
	if merge {
		c := &r.s.Chunks[r.lastIdx[d]]
		c.Data = append(c.Data, p...)
		*used += len(p)
		return
	}
	r.s.Chunks = append(r.s.Chunks, TtyChunk{Ms: now.Sub(r.start).Milliseconds(), Dir: dir, Data: append([]byte(nil), p...)})
	*used += len(p) + TtyChunkOverhead
	r.lastIdx[d], r.lastTime[d] = len(r.s.Chunks)-1, now
}

// Resize records a new terminal size (counted against the output bound).
func (r *TtyRecorder) Resize(rows, cols int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s.OutputTruncated || r.out+TtyChunkOverhead > TtyMaxBytes {
		r.s.OutputTruncated = true
		return
	}
	r.s.Chunks = append(r.s.Chunks, TtyChunk{Ms: time.Since(r.start).Milliseconds(), Dir: TtyResize, Rows: rows, Cols: cols})
	r.out += TtyChunkOverhead
}

// Session returns a copy of the session recorded so far.
func (r *TtyRecorder) Session() *TtySession {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.s
	s.Chunks = make([]TtyChunk, len(r.s.Chunks))
	for i, c := range r.s.Chunks {
		c.Data = append([]byte(nil), c.Data...)
		s.Chunks[i] = c
	}
	return &s
}
