package mcp

import (
	"fmt"
	"strings"
	"testing"
)

// TestCaptureBound: whatever the sizes of the writes, the text kept is
// at most the limit (plus the note), with the cut counted exactly: also
// when the output is just over the limit (the tail not yet trimmed).
func TestCaptureBound(t *testing.T) {
	const limit = 64
	for _, size := range []int{0, 1, limit - 1, limit, limit + 1, limit + 40, 2 * limit, 3*limit + 4096, 10000} {
		for _, chunk := range []int{1, 7, limit, 1 << 20} {
			data := make([]byte, size)
			for i := range data {
				data[i] = 'a' + byte(i%26)
			}
			c := newCapture(limit)
			for off := 0; off < size; off += chunk {
				c.Write(data[off:min(off+chunk, size)])
			}
			text, cut := c.Result("stdout")
			if size <= limit {
				if cut != 0 || text != string(data) {
					t.Fatalf("size %d chunk %d: cut %d, text %q", size, chunk, cut, text)
				}
				continue
			}
			note := fmt.Sprintf("\n[agentbox: %d bytes cut from the middle of stdout, which was %d bytes: the first %d and the last %d are shown]\n", size-limit, size, limit/2, limit/2)
			if want := string(data[:limit/2]) + note + string(data[size-limit/2:]); cut != int64(size-limit) || text != want {
				t.Fatalf("size %d chunk %d: cut %d, want %d; %d bytes of text, note present %v", size, chunk, cut, size-limit, len(text), strings.Contains(text, note))
			}
		}
	}
}

// TestCaptureNoteLine: the note is a line of its own, with no blank line
// around it, whether the kept head ends a line (line-oriented output, e.g.
// stderr) or not.
func TestCaptureNoteLine(t *testing.T) {
	for _, unit := range []string{"line 01\n", "x"} {
		c := newCapture(64)
		for range 100 {
			c.Write([]byte(unit))
		}
		text, cut := c.Result("stderr")
		before, after, ok := strings.Cut(text, "[agentbox: ")
		if !ok || cut == 0 {
			t.Fatalf("%q: no note in %q", unit, text)
		}
		if !strings.HasSuffix(before, "\n") || strings.HasSuffix(before, "\n\n") {
			t.Fatalf("%q: before the note %q: want exactly one line break", unit, before)
		}
		if _, rest, _ := strings.Cut(after, "]\n"); strings.HasPrefix(rest, "\n") {
			t.Fatalf("%q: a blank line after the note: %q", unit, text)
		}
	}
}
