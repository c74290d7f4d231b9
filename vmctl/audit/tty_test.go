package audit_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/agentbox/agentbox/vmctl/audit"
)

func TestTtyRecorderBounds(t *testing.T) {
	// Default: only the first TtyInputBytes typed bytes are kept.
	r := audit.NewTtyRecorder(24, 80, false)
	typed := bytes.Repeat([]byte("k"), 3000)
	for i := range typed {
		r.Input(typed[i : i+1])
	}
	r.Output([]byte("out"))
	r.Resize(30, 100)
	s := r.Session()
	var in, out []byte
	for _, c := range s.Chunks {
		switch c.Dir {
		case audit.TtyInput:
			in = append(in, c.Data...)
		case audit.TtyOutput:
			out = append(out, c.Data...)
		}
	}
	if !s.InputTruncated || len(in) == 0 || len(in) > audit.TtyInputBytes || !bytes.Equal(in, typed[:len(in)]) {
		t.Errorf("input kept %d bytes, truncated %v; want a prefix of at most %d", len(in), s.InputTruncated, audit.TtyInputBytes)
	}
	if string(out) != "out" || s.OutputTruncated || s.Rows != 24 || s.Cols != 80 {
		t.Errorf("session %+v", s)
	}
	if last := s.Chunks[len(s.Chunks)-1]; last.Dir != audit.TtyResize || last.Rows != 30 || last.Cols != 100 {
		t.Errorf("last chunk %+v", last)
	}

	// Full input; output bounded by TtyMaxBytes, whatever the chunking,
	// and the JSON stays within a small multiple of it.
	r = audit.NewTtyRecorder(24, 80, true)
	r.Input(typed)
	for range 200000 {
		r.Output([]byte("0123456789"))
	}
	s = r.Session()
	in = nil
	n := 0
	for _, c := range s.Chunks {
		if c.Dir == audit.TtyInput {
			in = append(in, c.Data...)
		} else {
			n += len(c.Data)
		}
	}
	if !bytes.Equal(in, typed) || s.InputTruncated {
		t.Errorf("full input: kept %d of %d bytes", len(in), len(typed))
	}
	if !s.OutputTruncated || n > audit.TtyMaxBytes || n < audit.TtyMaxBytes/2 {
		t.Errorf("output kept %d bytes, truncated %v; bound %d", n, s.OutputTruncated, audit.TtyMaxBytes)
	}
	b, _ := json.Marshal(s)
	if len(b) > 2*audit.TtyMaxBytes {
		t.Errorf("the session's JSON is %d bytes", len(b))
	}
}
