package agentproto

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzFrameScan: the guard's frame scan sees the same headers, and stops
// at the same one, whatever the chunks the bytes come in.
func FuzzFrameScan(f *testing.F) {
	hdr := func(typ uint8, flags uint16, id, length uint32) []byte {
		h := make([]byte, yamuxHeaderSize)
		h[1] = typ
		binary.BigEndian.PutUint16(h[2:4], flags)
		binary.BigEndian.PutUint32(h[4:8], id)
		binary.BigEndian.PutUint32(h[8:12], length)
		return h
	}
	f.Add(append(append(hdr(yamuxData, 0, 1, 3), 'a', 'b', 'c'), hdr(yamuxPing, yamuxSYN, 0, 7)...), uint8(1))
	f.Add(append(hdr(yamuxWindowUpdate, yamuxSYN, 2, 0), hdr(yamuxData, 0, 1, 1<<30)...), uint8(5))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		run := func(size int) ([]string, error) {
			var seen []string
			g := &Guard{}
			var s frameScan
			var err error
			for p := in; len(p) > 0 && err == nil; {
				k := min(size, len(p))
				err = s.scan(p[:k], func(h []byte) error {
					seen = append(seen, string(h))
					return g.checkIn(h)
				})
				p = p[k:]
			}
			return seen, err
		}
		whole, werr := run(len(in) + 1)
		parts, perr := run(int(chunk%32) + 1)
		if len(whole) != len(parts) || (werr == nil) != (perr == nil) {
			t.Fatalf("whole: %d headers, %v; in chunks of %d: %d headers, %v", len(whole), werr, chunk%32+1, len(parts), perr)
		}
		for i := range whole {
			if !bytes.Equal([]byte(whole[i]), []byte(parts[i])) {
				t.Fatalf("header %d differs", i)
			}
		}
	})
}
