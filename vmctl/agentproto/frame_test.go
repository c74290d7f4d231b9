package agentproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	sizes := []int{0, 1, 255, ChunkSize, MaxPayload}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	var want [][]byte
	var types []FrameType
	for ft := FrameRequest; ft <= maxFrameType; ft++ {
		for _, n := range sizes {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(i*7 + int(ft))
			}
			if err := w.WriteFrame(ft, p); err != nil {
				t.Fatalf("WriteFrame(%s, %d bytes): %v", ft, n, err)
			}
			want = append(want, p)
			types = append(types, ft)
		}
	}
	r := NewReader(&buf)
	for i := range want {
		ft, p, err := r.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if ft != types[i] || !bytes.Equal(p, want[i]) {
			t.Fatalf("frame %d: got %s/%d bytes, want %s/%d bytes", i, ft, len(p), types[i], len(want[i]))
		}
	}
	if _, _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("after last frame: got %v, want io.EOF", err)
	}
}

func TestWriteFramePackageLevelAndJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, FrameStdout, []byte("a\x00\xff")); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&buf, FrameSignal, SignalMessage{Signal: 15}); err != nil {
		t.Fatal(err)
	}
	want := []byte{byte(FrameStdout), 0, 0, 0, 3, 'a', 0, 0xff, byte(FrameSignal), 0, 0, 0, 14}
	want = append(want, `{"signal":15}`...)
	want[12] = byte(len(`{"signal":15}`))
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("encoding:\n got %q\nwant %q", buf.Bytes(), want)
	}
	r := NewReader(&buf)
	if ft, p, err := r.ReadFrame(); err != nil || ft != FrameStdout || string(p) != "a\x00\xff" {
		t.Fatalf("got %s %q %v", ft, p, err)
	}
	var sig SignalMessage
	if err := r.ReadJSON(FrameSignal, &sig); err != nil || sig.Signal != 15 {
		t.Fatalf("got %+v %v", sig, err)
	}
}

func TestReadJSONError(t *testing.T) {
	var buf bytes.Buffer
	WriteJSON(&buf, FrameError, Error{Code: CodeNotFound, Message: "/x: no such file"})
	WriteFrame(&buf, FrameStdout, nil)
	r := NewReader(&buf)
	var v Empty
	err := r.ReadJSON(FrameResponse, &v)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotFound || e.Message != "/x: no such file" {
		t.Fatalf("got %v", err)
	}
	err = r.ReadJSON(FrameResponse, &v)
	if err == nil || err.Error() != "agentproto: unexpected stdout frame, want response" {
		t.Fatalf("got %v", err)
	}
}

func TestWriteFrameRejects(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, FrameData, make([]byte, MaxPayload+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize: got %v", err)
	}
	if err := NewWriter(&buf).WriteFrame(0, nil); !errors.Is(err, ErrBadFrameType) {
		t.Fatalf("type 0: got %v", err)
	}
	if err := WriteFrame(&buf, maxFrameType+1, nil); !errors.Is(err, ErrBadFrameType) {
		t.Fatalf("unknown type: got %v", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("rejected frames wrote %d bytes", buf.Len())
	}
}

func TestReadFrameTruncated(t *testing.T) {
	var full bytes.Buffer
	WriteFrame(&full, FrameData, []byte("hello"))
	b := full.Bytes()
	for n := 1; n < len(b); n++ {
		_, _, err := ReadFrame(bytes.NewReader(b[:n]), nil)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%d of %d bytes: got %v, want io.ErrUnexpectedEOF", n, len(b), err)
		}
	}
	if _, _, err := ReadFrame(bytes.NewReader(nil), nil); err != io.EOF {
		t.Errorf("empty input: got %v, want io.EOF", err)
	}
}

func TestReadFrameOversizeNeverAllocates(t *testing.T) {
	hdr := make([]byte, HeaderSize)
	hdr[0] = byte(FrameData)
	binary.BigEndian.PutUint32(hdr[1:], MaxPayload+1)
	_, _, err := ReadFrame(bytes.NewReader(hdr), nil)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	binary.BigEndian.PutUint32(hdr[1:], 0xffffffff)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		ReadFrame(bytes.NewReader(hdr), nil)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Fatalf("100 oversize headers allocated %d bytes", n)
	}
	hdr[0] = 0
	binary.BigEndian.PutUint32(hdr[1:], 1)
	if _, _, err := ReadFrame(bytes.NewReader(hdr), nil); !errors.Is(err, ErrBadFrameType) {
		t.Fatalf("type 0: got %v", err)
	}
}

func TestReaderReusesBuffer(t *testing.T) {
	var buf bytes.Buffer
	WriteFrame(&buf, FrameData, make([]byte, 1000))
	WriteFrame(&buf, FrameData, make([]byte, 10))
	r := NewReader(&buf)
	_, p1, _ := r.ReadFrame()
	_, p2, _ := r.ReadFrame()
	if &p1[0] != &p2[0] {
		t.Fatal("second payload did not reuse the first buffer")
	}
}

// TestConcurrentWriters checks that frames of concurrent writers never
// interleave (run with -race).
func TestConcurrentWriters(t *testing.T) {
	pr, pw := io.Pipe()
	w := NewWriter(pw)
	const writers, frames = 8, 200
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range frames {
				p := bytes.Repeat([]byte(fmt.Sprintf("%d:%d;", g, i)), 1+i%300)
				if err := w.WriteFrame(FrameStdout, p); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); pw.Close() }()
	r := NewReader(pr)
	next := make([]int, writers)
	for {
		_, p, err := r.ReadFrame()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var g, i int
		if _, err := fmt.Sscanf(string(p), "%d:%d;", &g, &i); err != nil {
			t.Fatalf("bad payload %q", p[:min(len(p), 20)])
		}
		unit := fmt.Sprintf("%d:%d;", g, i)
		if !bytes.Equal(p, bytes.Repeat([]byte(unit), 1+i%300)) || next[g] != i {
			t.Fatalf("corrupted or reordered frame from writer %d: seq %d, want %d", g, i, next[g])
		}
		next[g]++
	}
	for g, n := range next {
		if n != frames {
			t.Fatalf("writer %d: got %d frames, want %d", g, n, frames)
		}
	}
}

func FuzzReadFrame(f *testing.F) {
	var seed bytes.Buffer
	WriteFrame(&seed, FrameRequest, []byte(`{"op":"ping"}`))
	WriteFrame(&seed, FrameDataEnd, nil)
	f.Add(seed.Bytes())
	f.Add([]byte{byte(FrameData), 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{byte(FrameData), 0, 0x10, 0, 1, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		consumed := 0
		for {
			ft, p, err := r.ReadFrame()
			if err != nil {
				if err == io.EOF && consumed != len(data) {
					t.Fatalf("io.EOF after %d of %d bytes", consumed, len(data))
				}
				return
			}
			if !ft.Valid() || len(p) > MaxPayload || cap(p) > MaxPayload {
				t.Fatalf("frame %s with %d bytes (cap %d)", ft, len(p), cap(p))
			}
			consumed += HeaderSize + len(p)
			if !bytes.Equal(data[consumed-len(p):consumed], p) {
				t.Fatal("payload differs from input")
			}
		}
	})
}
