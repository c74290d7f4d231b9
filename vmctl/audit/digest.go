package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strings"
	"sync"
	"unicode/utf8"
)

// OutputDigester is an io.Writer that summarises the stream written to it
// as an OutputDigest: it hashes everything (SHA-256), counts the bytes and
// keeps the first HeadBytes. The daemon tees an exec's stdout and stderr
// into one each. The zero value is ready to use; it is safe for
// concurrent use.
type OutputDigester struct {
	mu   sync.Mutex
	h    hash.Hash
	n    int64
	head []byte
}

// Write adds p to the stream. It never fails.
func (d *OutputDigester) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h == nil {
		d.h = sha256.New()
	}
	d.h.Write(p)
	d.n += int64(len(p))
	if room := HeadBytes - len(d.head); room > 0 {
		d.head = append(d.head, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Digest summarises what was written so far (it may be called again after
// more writes). Head is the kept bytes as text: each byte that is not
// part of valid UTF-8 becomes U+FFFD, except that a character cut in two
// by the HeadBytes limit is dropped whole. An empty stream has Bytes 0 and
// the SHA-256 of nothing.
func (d *OutputDigester) Digest() *OutputDigest {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.h
	if h == nil {
		h = sha256.New()
	}
	truncated := d.n > int64(len(d.head))
	head := d.head
	if truncated {
		head = trimCutRune(head)
	}
	return &OutputDigest{
		Bytes:     d.n,
		SHA256:    hex.EncodeToString(h.Sum(nil)),
		Head:      validText(head),
		Truncated: truncated,
	}
}

// trimCutRune drops the start of a multi-byte UTF-8 character at the end
// of b whose remaining bytes were cut off.
func trimCutRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// validText returns b as a string with every byte that is not part of
// valid UTF-8 replaced by U+FFFD.
func validText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 16)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		sb.WriteRune(r) // RuneError (U+FFFD) for an invalid byte, size 1
		b = b[size:]
	}
	return sb.String()
}
