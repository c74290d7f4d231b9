package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestDigesterEmpty(t *testing.T) {
	var d OutputDigester
	want := &OutputDigest{Bytes: 0, SHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
	if got := d.Digest(); !reflect.DeepEqual(got, want) {
		t.Fatalf("empty digest %+v, want %+v", got, want)
	}
}

func TestDigesterSmall(t *testing.T) {
	var d OutputDigester
	for _, chunk := range []string{"hello ", "", "world\n"} {
		if n, err := d.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	want := &OutputDigest{Bytes: 12, SHA256: "a948904f2f0f479b8f8197694b30184b0d2ed1c1cd2a1ec0fb85d299a192a447", Head: "hello world\n"}
	if got := d.Digest(); !reflect.DeepEqual(got, want) {
		t.Fatalf("digest %+v, want %+v", got, want)
	}
}

func TestDigesterTruncates(t *testing.T) {
	data := make([]byte, 3*HeadBytes+17)
	for i := range data {
		data[i] = 'a' + byte(i%26)
	}
	var d OutputDigester
	// Writes that straddle the head limit in odd pieces.
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 333)
		d.Write(rest[:n])
		rest = rest[n:]
	}
	got := d.Digest()
	want := &OutputDigest{Bytes: int64(len(data)), SHA256: sha(data), Head: string(data[:HeadBytes]), Truncated: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("digest Bytes=%d SHA=%s head %d bytes truncated=%v; want Bytes=%d SHA=%s head %d bytes truncated=true",
			got.Bytes, got.SHA256, len(got.Head), got.Truncated, want.Bytes, want.SHA256, HeadBytes)
	}
}

func TestDigesterExactlyHeadBytes(t *testing.T) {
	data := bytes.Repeat([]byte("z"), HeadBytes)
	var d OutputDigester
	d.Write(data)
	if got := d.Digest(); got.Truncated || got.Head != string(data) || got.Bytes != HeadBytes {
		t.Fatalf("digest of exactly HeadBytes: truncated=%v head %d bytes", got.Truncated, len(got.Head))
	}
	d.Write([]byte("!"))
	if got := d.Digest(); !got.Truncated || got.Head != string(data) || got.Bytes != HeadBytes+1 || got.SHA256 != sha(append(data, '!')) {
		t.Fatalf("digest after one more byte: %+v", got)
	}
}

func TestDigesterInvalidUTF8(t *testing.T) {
	var d OutputDigester
	in := []byte("ok \xff\xfe é \xe2\x82 end") // two invalid bytes, then a cut €
	d.Write(in)
	got := d.Digest()
	want := &OutputDigest{Bytes: int64(len(in)), SHA256: sha(in), Head: "ok \uFFFD\uFFFD é \uFFFD\uFFFD end"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("digest %+v, want %+v", got, want)
	}
}

func TestDigesterCutRuneAtHeadLimit(t *testing.T) {
	// "€" is 3 bytes; put one across the HeadBytes boundary.
	data := append(bytes.Repeat([]byte("a"), HeadBytes-1), "€ and more"...)
	var d OutputDigester
	d.Write(data)
	got := d.Digest()
	if want := strings.Repeat("a", HeadBytes-1); got.Head != want || !got.Truncated {
		t.Fatalf("head ends %q (truncated %v), want the cut € dropped", got.Head[len(got.Head)-4:], got.Truncated)
	}
	// Not truncated: a stream that ends with half a character shows it
	// as invalid.
	var d2 OutputDigester
	d2.Write([]byte("x\xe2\x82"))
	if got := d2.Digest(); got.Head != "x\uFFFD\uFFFD" || got.Truncated {
		t.Fatalf("short stream ending in half a rune: %+v", got)
	}
}

func TestDigesterCopyAndConcurrentDigest(t *testing.T) {
	data := make([]byte, 5<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	var d OutputDigester
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 50 {
			d.Digest() // alongside the writes: -race checks the locking
		}
	})
	if n, err := io.Copy(&d, bytes.NewReader(data)); n != int64(len(data)) || err != nil {
		t.Fatalf("io.Copy = %d, %v", n, err)
	}
	wg.Wait()
	got := d.Digest()
	if got.Bytes != int64(len(data)) || got.SHA256 != sha(data) || !got.Truncated || got.Head != validText(trimCutRune(data[:HeadBytes])) {
		t.Fatalf("digest of 5 MiB: Bytes=%d SHA=%s truncated=%v", got.Bytes, got.SHA256, got.Truncated)
	}
}
