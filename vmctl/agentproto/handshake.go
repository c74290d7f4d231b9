package agentproto

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Magic starts every handshake line. Its first byte 'A' can never start a
// yamux frame (whose first byte is the yamux version, 0), which lets the
// guest tell a late hello from session data.
const Magic = "AGENTBOX/"

const (
	// MaxHandshakeScan bounds the bytes either side reads while looking for
	// its handshake line (1 MiB), stale bytes and foreign lines included.
	MaxHandshakeScan = 1 << 20
	// maxLine bounds one handshake line after the magic; longer "lines"
	// are treated as garbage.
	maxLine = 512
	// maxNonce bounds the nonce length.
	maxNonce = 64
)

// Handshake errors, of errdefs.ErrInternal: a create whose guest fails the
// handshake fails its agent step, answered 500 internal as it always was.
var (
	// ErrVersionMismatch is wrapped by the handshake error when host and
	// guest speak different protocol versions.
	ErrVersionMismatch = errdefs.New(errdefs.ErrInternal, "", "agentproto: protocol version mismatch")
	// ErrNoHandshake is wrapped when MaxHandshakeScan bytes were read
	// without finding a valid handshake line.
	ErrNoHandshake = errdefs.New(errdefs.ErrInternal, "", "agentproto: no handshake found")
	// ErrHandshakeRefused is wrapped when the guest answered with an ERR
	// line for another reason than a version mismatch.
	ErrHandshakeRefused = errdefs.New(errdefs.ErrInternal, "", "agentproto: handshake refused by guest")
)

// Hello is the host's handshake line as read by the guest.
type Hello struct {
	// Version is the host's protocol version.
	Version int
	// Nonce is the host's random session token, echoed in the reply.
	Nonce string
}

// NewNonce returns a fresh random nonce: 32 lower-case hex digits.
func NewNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("agentproto: nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// MismatchMessage is the explanation sent and reported when the guest speaks
// protocol guest and the host protocol host.
func MismatchMessage(guest, host int) string {
	return fmt.Sprintf("guest agent speaks protocol %d, host %d: rebuild the image with a matching agentbox-guest", guest, host)
}

// ClientHandshake performs the host side: it writes the hello line with
// nonce to w and scans r for the guest's reply carrying that nonce,
// discarding stale bytes and replies to other nonces. It returns the guest
// agent's version string. r must be the only reader of the connection; bytes
// it buffers past the reply belong to the session that follows.
//
// Errors: the write or read error (io.EOF if the stream ends, a timeout if
// the connection has a deadline), an error wrapping ErrVersionMismatch,
// ErrHandshakeRefused or ErrNoHandshake.
func ClientHandshake(r *bufio.Reader, w io.Writer, nonce string) (agentVersion string, err error) {
	if !validToken(nonce) {
		return "", fmt.Errorf("agentproto: invalid nonce %q", nonce)
	}
	if _, err := fmt.Fprintf(w, "%s%d HELLO %s\n", Magic, ProtocolVersion, nonce); err != nil {
		return "", fmt.Errorf("agentproto: write hello: %w", err)
	}
	budget := MaxHandshakeScan
	for {
		line, err := scanLine(r, &budget)
		if err != nil {
			return "", err
		}
		// "<version> OK <nonce> <agent-version>" or "<version> ERR <nonce> <message>"
		f := strings.SplitN(line, " ", 4)
		if len(f) < 3 || f[2] != nonce {
			continue
		}
		v, verr := strconv.Atoi(f[0])
		rest := ""
		if len(f) == 4 {
			rest = f[3]
		}
		switch {
		case f[1] != "OK" && f[1] != "ERR":
			continue
		case verr != nil:
			return "", fmt.Errorf("%w: guest sent version %q", ErrVersionMismatch, f[0])
		case v != ProtocolVersion:
			return "", fmt.Errorf("%w: %s", ErrVersionMismatch, MismatchMessage(v, ProtocolVersion))
		case f[1] == "ERR":
			return "", fmt.Errorf("%w: %s", ErrHandshakeRefused, rest)
		}
		return rest, nil
	}
}

// AcceptHello performs the guest side: it scans r for the next host hello,
// discarding stale bytes, and answers it on w with an OK line carrying
// agentVersion (which must not contain spaces or newlines), or with an ERR
// line when the host's protocol version differs.
//
// Errors: the read or write error (io.EOF if the stream ends before a
// hello), ErrNoHandshake, or for a version mismatch an error wrapping
// ErrVersionMismatch (the Hello is still returned).
func AcceptHello(r *bufio.Reader, w io.Writer, agentVersion string) (Hello, error) {
	h, err := ReadHello(r)
	if err != nil {
		return Hello{}, err
	}
	if h.Version != ProtocolVersion {
		msg := MismatchMessage(ProtocolVersion, h.Version)
		if _, err := fmt.Fprintf(w, "%s%d ERR %s %s\n", Magic, ProtocolVersion, h.Nonce, msg); err != nil {
			return h, fmt.Errorf("agentproto: write reply: %w", err)
		}
		return h, fmt.Errorf("%w: %s", ErrVersionMismatch, msg)
	}
	if agentVersion == "" || strings.ContainsAny(agentVersion, " \n") {
		agentVersion = "unknown"
	}
	if _, err := fmt.Fprintf(w, "%s%d OK %s %s\n", Magic, ProtocolVersion, h.Nonce, agentVersion); err != nil {
		return h, fmt.Errorf("agentproto: write reply: %w", err)
	}
	return h, nil
}

// ReadHello scans r for the next well-formed hello line of any protocol
// version and returns it, discarding everything before it and lines that
// are not hellos, within MaxHandshakeScan bytes. It never writes. Errors:
// the read error (io.EOF when r ends) or ErrNoHandshake.
func ReadHello(r *bufio.Reader) (Hello, error) {
	budget := MaxHandshakeScan
	for {
		line, err := scanLine(r, &budget)
		if err != nil {
			return Hello{}, err
		}
		// "<version> HELLO <nonce>"
		f := strings.Split(line, " ")
		if len(f) != 3 || f[1] != "HELLO" || !validToken(f[2]) {
			continue
		}
		v, err := strconv.Atoi(f[0])
		if err != nil || v <= 0 || len(f[0]) > 9 {
			continue
		}
		return Hello{Version: v, Nonce: f[2]}, nil
	}
}

// scanLine consumes r up to and including the next Magic and returns the
// rest of that line without "\n" (and without a trailing "\r"). Lines longer
// than maxLine are skipped. Every byte consumed counts against *budget.
func scanLine(r *bufio.Reader, budget *int) (string, error) {
	matched := 0
	for {
		if matched == len(Magic) {
			line, ok, err := readLine(r, budget)
			if err != nil {
				return "", err
			}
			if ok {
				// A line cut short by a disconnect may run into the next
				// handshake line; keep only the text after the last magic.
				if i := strings.LastIndex(line, Magic); i >= 0 {
					line = line[i+len(Magic):]
				}
				return line, nil
			}
			matched = 0
			continue
		}
		c, err := readByte(r, budget)
		if err != nil {
			return "", err
		}
		switch {
		case c == Magic[matched]:
			matched++
		case c == Magic[0]:
			matched = 1
		default:
			matched = 0
		}
	}
}

// readLine reads up to "\n". ok is false when the line exceeded maxLine
// (the excess up to the newline, or up to the next magic start, is left to
// the caller's scan).
func readLine(r *bufio.Reader, budget *int) (line string, ok bool, err error) {
	var b strings.Builder
	for b.Len() <= maxLine {
		c, err := readByte(r, budget)
		if err != nil {
			return "", false, err
		}
		if c == '\n' {
			return strings.TrimSuffix(b.String(), "\r"), true, nil
		}
		b.WriteByte(c)
	}
	return "", false, nil
}

func readByte(r *bufio.Reader, budget *int) (byte, error) {
	if *budget <= 0 {
		return 0, fmt.Errorf("%w within %d bytes", ErrNoHandshake, MaxHandshakeScan)
	}
	*budget--
	return r.ReadByte()
}

// validToken reports whether s is a non-empty nonce of at most maxNonce
// characters from [A-Za-z0-9_-].
func validToken(s string) bool {
	if s == "" || len(s) > maxNonce {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
