package agentproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// FrameType is the first byte of a frame and says how to read its payload.
// The numeric values are part of the protocol.
type FrameType uint8

// Frame types. "host→guest" and "guest→host" give the direction; JSON
// payloads name their Go type.
const (
	// FrameRequest (host→guest) is the first frame of every stream; payload
	// is a JSON [Request].
	FrameRequest FrameType = 1
	// FrameResponse (guest→host) is the JSON result of a successful
	// operation; its Go type depends on the [Op].
	FrameResponse FrameType = 2
	// FrameError (guest→host) ends a failed operation; payload is a JSON
	// [Error].
	FrameError FrameType = 3
	// FrameStdin (host→guest) carries raw bytes for the command's stdin.
	FrameStdin FrameType = 4
	// FrameStdinClose (host→guest, empty payload) closes the command's
	// stdin.
	FrameStdinClose FrameType = 5
	// FrameStdout (guest→host) carries raw bytes the command wrote to
	// stdout, unchanged.
	FrameStdout FrameType = 6
	// FrameStderr (guest→host) carries raw bytes the command wrote to
	// stderr, unchanged.
	FrameStderr FrameType = 7
	// FrameSignal (host→guest) asks the guest to signal the command's
	// process group; payload is a JSON [SignalMessage].
	FrameSignal FrameType = 8
	// FrameStarted (guest→host) reports that the command started; payload
	// is a JSON [Started].
	FrameStarted FrameType = 9
	// FrameExit (guest→host) is the last frame of an exec; payload is a
	// JSON [ExitStatus].
	FrameExit FrameType = 10
	// FrameData (either direction) carries raw file bytes (read/write) or a
	// JSON batch of directory entries (list).
	FrameData FrameType = 11
	// FrameDataEnd (either direction, empty payload) ends a sequence of
	// FrameData frames.
	FrameDataEnd FrameType = 12
	// FrameResize (host→guest) sets the window size of an exec's terminal
	// (ExecRequest.Tty); payload is a JSON [TtySize]. The guest ignores it
	// (and logs) for an exec without a terminal: hosts refuse that before
	// sending (agent.Process.Resize).
	FrameResize FrameType = 13
	// FrameProcOutput (guest→host) carries a chunk of a detached
	// process's output (OpProcOutput): one byte stream (1 stdout,
	// 2 stderr), the chunk's offset in the combined output as a big-endian
	// uint64, then the bytes; see [ProcChunk].
	FrameProcOutput FrameType = 14

	maxFrameType = FrameProcOutput
)

var frameTypeNames = [...]string{
	FrameRequest:    "request",
	FrameResponse:   "response",
	FrameError:      "error",
	FrameStdin:      "stdin",
	FrameStdinClose: "stdin-close",
	FrameStdout:     "stdout",
	FrameStderr:     "stderr",
	FrameSignal:     "signal",
	FrameStarted:    "started",
	FrameExit:       "exit",
	FrameData:       "data",
	FrameDataEnd:    "data-end",
	FrameResize:     "resize",
	FrameProcOutput: "proc-output",
}

// String returns the lower-case name of t, or "frame(N)" for unknown types.
func (t FrameType) String() string {
	if t.Valid() {
		return frameTypeNames[t]
	}
	return "frame(" + strconv.Itoa(int(t)) + ")"
}

// Valid reports whether t is a frame type of this protocol version.
func (t FrameType) Valid() bool { return t >= FrameRequest && t <= maxFrameType }

const (
	// HeaderSize is the size in bytes of a frame header: one type byte and
	// a big-endian uint32 payload length.
	HeaderSize = 5
	// MaxPayload is the largest payload of a frame in bytes (1 MiB). A
	// header announcing more is a decode error ([ErrFrameTooLarge]); the
	// payload is never allocated.
	MaxPayload = 1 << 20
	// ChunkSize is the payload size senders use for streamed bytes
	// (stdout, stderr, stdin, file data): 64 KiB.
	ChunkSize = 64 << 10
)

var (
	// ErrFrameTooLarge is returned when a frame payload exceeds MaxPayload,
	// on write (nothing is written) or on read (the stream is unusable).
	ErrFrameTooLarge = errdefs.New(errdefs.ErrInternal, "", "agentproto: frame payload too large")
	// ErrBadFrameType is returned for a frame type this version does not
	// know, on write or on read.
	ErrBadFrameType = errdefs.New(errdefs.ErrInternal, "", "agentproto: unknown frame type")
)

func putHeader(b []byte, t FrameType, n int) {
	b[0] = byte(t)
	binary.BigEndian.PutUint32(b[1:HeaderSize], uint32(n))
}

func checkFrame(t FrameType, n int) error {
	if !t.Valid() {
		return fmt.Errorf("%w: %d", ErrBadFrameType, t)
	}
	if n > MaxPayload {
		return fmt.Errorf("%w: %d bytes, max %d", ErrFrameTooLarge, n, MaxPayload)
	}
	return nil
}

// WriteFrame writes one frame of type t with payload p to w in a single
// Write call, so it is atomic on writers that serialise whole Write calls
// (a yamux stream does). It allocates a buffer of HeaderSize+len(p) bytes;
// use a [Writer] to reuse one and to serialise concurrent writers.
// Errors: ErrBadFrameType, ErrFrameTooLarge (nothing written), or w's error.
func WriteFrame(w io.Writer, t FrameType, p []byte) error {
	if err := checkFrame(t, len(p)); err != nil {
		return err
	}
	b := make([]byte, HeaderSize+len(p))
	putHeader(b, t, len(p))
	copy(b[HeaderSize:], p)
	_, err := w.Write(b)
	return err
}

// Writer writes frames to an underlying writer. It is safe for concurrent
// use: each frame is written whole, under a mutex, with one Write call, so
// frames of concurrent writers (stdout and stderr pumps) never interleave.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewWriter returns a Writer writing frames to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// WriteFrame writes one frame; see the package-level [WriteFrame] for the
// errors. The payload is copied, so p may be reused once it returns.
func (w *Writer) WriteFrame(t FrameType, p []byte) error {
	if err := checkFrame(t, len(p)); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := HeaderSize + len(p)
	if cap(w.buf) < n {
		w.buf = make([]byte, n)
	}
	b := w.buf[:n]
	putHeader(b, t, len(p))
	copy(b[HeaderSize:], p)
	_, err := w.w.Write(b)
	if cap(w.buf) > 2*ChunkSize+HeaderSize {
		w.buf = nil // do not pin a rare 1 MiB buffer
	}
	return err
}

// WriteJSON marshals v and writes it as one frame of type t. Errors: the
// marshalling error, ErrFrameTooLarge if the JSON exceeds MaxPayload, or the
// underlying writer's error.
func (w *Writer) WriteJSON(t FrameType, v any) error {
	p, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("agentproto: encode %s frame: %w", t, err)
	}
	return w.WriteFrame(t, p)
}

// WriteJSON marshals v and writes it to w as one frame of type t, like
// [Writer.WriteJSON] without the mutex.
func WriteJSON(w io.Writer, t FrameType, v any) error {
	p, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("agentproto: encode %s frame: %w", t, err)
	}
	return WriteFrame(w, t, p)
}

// ReadFrame reads one frame from r into buf (grown if too small, never
// beyond MaxPayload) and returns its type and payload, which aliases the
// returned buffer. It returns io.EOF, unwrapped, only when r ends exactly at
// a frame boundary; a frame cut short yields an error wrapping
// io.ErrUnexpectedEOF. A payload length above MaxPayload yields
// ErrFrameTooLarge and an unknown type ErrBadFrameType, both before the
// payload is read.
func ReadFrame(r io.Reader, buf []byte) (t FrameType, payload []byte, err error) {
	var hdr [HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("agentproto: truncated frame header: %w", err)
		}
		return 0, nil, err
	}
	t = FrameType(hdr[0])
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxPayload {
		return 0, nil, fmt.Errorf("%w: %d bytes, max %d", ErrFrameTooLarge, n, MaxPayload)
	}
	if !t.Valid() {
		return 0, nil, fmt.Errorf("%w: %d", ErrBadFrameType, hdr[0])
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("agentproto: truncated %s frame: %w", t, err)
	}
	return t, buf, nil
}

// Reader reads frames from an underlying reader, reusing one payload buffer.
// It is not safe for concurrent use.
type Reader struct {
	r   io.Reader
	buf []byte
}

// NewReader returns a Reader reading frames from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// ReadFrame reads the next frame; see the package-level [ReadFrame] for the
// errors. The payload is valid only until the next call.
func (r *Reader) ReadFrame() (FrameType, []byte, error) {
	t, p, err := ReadFrame(r.r, r.buf)
	if err == nil && cap(p) > cap(r.buf) {
		r.buf = p[:0]
	}
	return t, p, err
}

// ReadJSON reads the next frame and decodes its JSON payload into v. It
// returns the frame type; when the type is FrameError the payload is
// decoded as an [Error] instead and returned as the error, so callers see
// the guest's error directly. Any other type than want (and FrameError) is
// an error of unexpected frame, and v is not touched.
func (r *Reader) ReadJSON(want FrameType, v any) error {
	t, p, err := r.ReadFrame()
	if err != nil {
		return err
	}
	return DecodeFrame(t, p, want, v)
}

// DecodeFrame decodes the payload p of a frame of type t into v, which
// must be of the type documented for want. A FrameError frame is decoded and
// returned as *Error; any other type than want yields an error describing
// the unexpected frame. v may be nil to ignore the payload of want.
func DecodeFrame(t FrameType, p []byte, want FrameType, v any) error {
	switch t {
	case want:
		if v == nil {
			return nil
		}
		if err := json.Unmarshal(p, v); err != nil {
			return fmt.Errorf("agentproto: decode %s frame: %w", t, err)
		}
		return nil
	case FrameError:
		return DecodeError(p)
	default:
		return fmt.Errorf("agentproto: unexpected %s frame, want %s", t, want)
	}
}

// DecodeError decodes the payload of a FrameError frame and returns it as
// *Error. A payload that is not a valid Error yields an *Error with CodeIO
// describing the decoding failure, so the result is never nil.
func DecodeError(p []byte) error {
	var e Error
	if err := json.Unmarshal(p, &e); err != nil || e.Code == "" {
		return &Error{Code: CodeIO, Message: fmt.Sprintf("malformed error frame %q", truncate(p, 200))}
	}
	return &e
}

func truncate(p []byte, n int) []byte {
	if len(p) > n {
		return p[:n]
	}
	return p
}
