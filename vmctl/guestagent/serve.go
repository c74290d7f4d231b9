package guestagent

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// Options configures a guest agent session. The zero value is usable.
type Options struct {
	// Version is the agent version reported in the handshake (no spaces);
	// empty means "unknown".
	Version string
	// Logger receives one record per failed operation and per session;
	// nil discards.
	Logger *slog.Logger
	// SetClock sets the realtime clock for OpSetTime; nil means
	// clock_settime(CLOCK_REALTIME). Tests inject a fake.
	SetClock func(time.Time) error
	// SetHostname sets the kernel hostname for OpIdentity; nil means
	// sethostname(2). EtcDir is where OpIdentity replaces hostname and
	// machine-id; empty means /etc. Tests inject both.
	SetHostname func(name string) error
	EtcDir      string
	// Shutdown is called for OpShutdown after the response was sent, with
	// reboot false for power-off. It is expected not to return (the guest
	// goes down); nil answers the request with CodeUnsupported.
	Shutdown func(reboot bool)
	// User, if set, is who commands run as when their ExecRequest names no
	// UID (a non-root user, e.g. the NixOS guest module's "agent"); files
	// the host writes and directories it makes are given to it too. Nil
	// means root.
	User *User
	// Path is the PATH commands start with; empty means
	// agentproto.DefaultPath (NixOS guests pass their system profile).
	Path string
	// ConfigureNetwork serves OpConfigureNetwork; nil answers it with
	// CodeUnsupported. The agent running as init sets ConfigureNetwork
	// (network_linux.go); tests inject a fake.
	ConfigureNetwork func(agentproto.NetworkRequest) error
	// Processes keeps the detached processes (proc-* operations) across
	// sessions; ServePort passes one table to all its sessions. Nil in
	// Serve: a table of the session alone, closed (its commands killed)
	// when the session ends.
	Processes *Processes
	// Reseed serves OpReseed: it credits the entropy to the kernel and
	// reseeds the CRNG, reporting whether the reseed happened; nil means
	// the kernel's (reseed_linux.go). Tests inject a fake.
	Reseed func(entropy []byte) (reseeded bool, err error)
	// TrustRoot is the root directory OpTrustCA installs a CA certificate
	// under (TrustCA); empty means "/". Tests pass a temporary directory.
	TrustRoot string
}

// User is a guest account: its ids and home directory.
type User struct {
	// Name is the login name (USER and LOGNAME of its commands).
	Name string
	// UID and GID are its user and primary group ids.
	UID, GID uint32
	// Home is its home directory (HOME), "/" if unknown.
	Home string
}

func (o *Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// server is the state of one session.
type server struct {
	opts  Options
	log   *slog.Logger
	execs execRegistry
	procs *Processes      // procs_linux.go
	life  context.Context // ends with the session
}

// Serve handles one host session on conn: it answers the host's hello
// (skipping stale bytes before it), then runs a yamux server and handles
// each stream the host opens in its own goroutine. It returns once the
// session ended and every handler finished, always closing conn.
//
// It returns nil when the host closed the session (EOF or ECONNRESET on
// conn), ctx.Err()
// when ctx was cancelled (running commands are killed), and otherwise the
// handshake error (wrapping agentproto.ErrVersionMismatch on a version
// mismatch, io.EOF if conn ended before a hello) or the session error.
// Running commands are killed with their process group when the session
// ends; detached processes (proc-spawn) are not, when opts.Processes
// outlives the session. A hello where the next yamux frame should start ends the session
// too (nil): its sender is a new host, see ServePort.
func Serve(ctx context.Context, conn io.ReadWriteCloser, opts Options) error {
	return serve(ctx, conn, bufio.NewReaderSize(conn, agentproto.ChunkSize), opts)
}

// errNewHello ends a session whose byte stream continues with a hello: the
// host went away and another one connected without the guest noticing
// (ServePort keeps the bytes for the next session).
var errNewHello = errors.New("guestagent: a new host said hello")

// serve is Serve reading conn through br, which may hold bytes of an
// earlier session on the same port and keeps unread bytes for the next.
func serve(ctx context.Context, conn io.ReadWriteCloser, br *bufio.Reader, opts Options) error {
	StartReaper()
	s := &server{opts: opts, log: opts.logger(), procs: opts.Processes}
	if s.procs == nil {
		s.procs = NewProcesses()
		defer s.procs.Close()
	}
	life, endSession := context.WithCancel(ctx)
	defer endSession()
	s.life = life

	stopHS := context.AfterFunc(ctx, func() { conn.Close() })
	hello, err := agentproto.AcceptHello(br, conn, opts.Version)
	if !stopHS() {
		conn.Close()
		return ctx.Err()
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("guestagent: handshake: %w", err)
	}
	s.log.Info("host session started", "nonce", hello.Nonce)

	sc := &sessionConn{r: br, conn: conn}
	var yc io.ReadWriteCloser = sc
	if hostile != nil {
		yc = hostile.session(sc)
	}
	sess, err := yamux.Server(yc, agentproto.YamuxConfig())
	if err != nil {
		conn.Close()
		return fmt.Errorf("guestagent: yamux: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()

	var wg sync.WaitGroup
	var acceptErr error
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			acceptErr = err
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handle(st)
		}()
	}
	sess.Close()
	endSession() // handlers waiting for a detached process's stdin give up
	wg.Wait()
	s.log.Info("host session ended", "reason", acceptErr, "read_error", sc.err)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case sc.err == nil, errors.Is(sc.err, io.EOF), errors.Is(sc.err, errNewHello),
		errors.Is(sc.err, syscall.ECONNRESET), // a socket peer closed with unread data
		// The session ended first (e.g. the host's yamux GoAway) and
		// sess.Close above closed conn under a read still in flight.
		errors.Is(sc.err, net.ErrClosed), errors.Is(sc.err, fs.ErrClosed):
		return nil
	}
	return fmt.Errorf("guestagent: session: %w", sc.err)
}

// hostile is the misbehaving agent of the test build (hostile.go, build
// tag hostile: the isolation suite's hostile guest agent, which attacks
// the host's side of the protocol on command); nil in every other build.
var hostile interface {
	// session wraps the connection under the session's yamux server.
	session(c io.ReadWriteCloser) io.ReadWriteCloser
	// handle serves req instead of the agent when it reports true.
	handle(fw *agentproto.Writer, req agentproto.Request) bool
}

// yamuxHeaderSize is the size of a yamux frame header: version, type,
// flags (2), stream id (4), length (4). Only data frames (type 0) are
// followed by length payload bytes.
const yamuxHeaderSize = 12

// sessionConn is the connection under the yamux server. It follows the
// yamux framing so that it can look at the first byte of every frame: a
// yamux frame starts with version 0, never with the magic's 'A', so a hello
// there means the host went away and a new one connected before the guest
// read the EOF in between. The session then ends with errNewHello and the
// hello stays in the buffered reader for the next session.
type sessionConn struct {
	r         *bufio.Reader
	conn      io.ReadWriteCloser
	remaining int   // bytes left of the current yamux frame
	err       error // first read error, read after the session ended
}

// Read implements io.Reader.
func (c *sessionConn) Read(p []byte) (int, error) {
	if c.remaining == 0 {
		b, err := c.r.Peek(1)
		if err != nil {
			return 0, c.fail(err)
		}
		if b[0] == agentproto.Magic[0] {
			return 0, c.fail(errNewHello)
		}
		hdr, err := c.r.Peek(yamuxHeaderSize)
		if err != nil {
			return 0, c.fail(err)
		}
		c.remaining = yamuxHeaderSize
		if hdr[1] == 0 { // typeData
			c.remaining += int(binary.BigEndian.Uint32(hdr[8:12]))
		}
	}
	if len(p) > c.remaining {
		p = p[:c.remaining]
	}
	n, err := c.r.Read(p)
	c.remaining -= n
	if err != nil {
		c.fail(err)
	}
	return n, err
}

func (c *sessionConn) fail(err error) error {
	if c.err == nil {
		c.err = err
	}
	return err
}

// Write implements io.Writer.
func (c *sessionConn) Write(p []byte) (int, error) { return c.conn.Write(p) }

// Close implements io.Closer.
func (c *sessionConn) Close() error { return c.conn.Close() }

// handle serves one stream: it reads the request and dispatches on its op.
func (s *server) handle(st *yamux.Stream) {
	defer st.Close()
	fr := agentproto.NewReader(st)
	fw := agentproto.NewWriter(st)
	var req agentproto.Request
	if err := fr.ReadJSON(agentproto.FrameRequest, &req); err != nil {
		s.fail(fw, "request", fmt.Errorf("read request: %w", err))
		return
	}
	if err := req.Validate(); err != nil {
		s.fail(fw, req.Op, err)
		return
	}
	if hostile != nil && hostile.handle(fw, req) {
		return
	}
	var err error
	switch req.Op {
	case agentproto.OpExec:
		s.exec(st, fr, fw, req.Exec)
		return
	case agentproto.OpSignal:
		err = s.signal(fw, req.Signal)
	case agentproto.OpReadFile:
		err = readFile(fw, req.Path.Path)
	case agentproto.OpWriteFile:
		err = writeFile(fr, fw, req.WriteFile, s.opts.User)
	case agentproto.OpStat:
		err = stat(fw, req.Path.Path)
	case agentproto.OpList:
		err = list(fw, req.Path.Path)
	case agentproto.OpMkdir:
		err = mkdir(fw, req.Mkdir, s.opts.User)
	case agentproto.OpRemove:
		err = remove(fw, req.Remove)
	case agentproto.OpPing:
		err = fw.WriteJSON(agentproto.FrameResponse, agentproto.PingResponse{TimeNs: time.Now().UnixNano()})
	case agentproto.OpSetTime:
		err = s.setTime(fw, req.SetTime)
	case agentproto.OpShutdown:
		err = s.shutdown(st, fw, req.Shutdown)
	case agentproto.OpIdentity:
		err = s.identity(fw, req.Identity)
	case agentproto.OpConfigureNetwork:
		err = s.configureNetwork(fw, req.Network)
	case agentproto.OpProcSpawn:
		err = s.procSpawn(fw, req.ProcSpawn)
	case agentproto.OpProcList:
		err = s.procList(fw, req.ProcList)
	case agentproto.OpProcWait:
		err = s.procWait(st, fw, req.Proc)
	case agentproto.OpProcOutput:
		err = s.procOutput(st, fw, req.ProcOutput)
	case agentproto.OpProcStdin:
		err = s.procStdin(fr, fw, req.ProcStdin)
	case agentproto.OpProcSignal:
		err = s.procSignal(fw, req.ProcSignal)
	case agentproto.OpProcForget:
		err = s.procForget(fw, req.Proc)
	case agentproto.OpProcResize:
		err = s.procResize(fw, req.ProcResize)
	case agentproto.OpConnect:
		err = s.connect(st, fr, fw, req.Connect)
	case agentproto.OpReseed:
		err = s.reseed(fw, req.Reseed)
	case agentproto.OpWatch:
		err = s.watch(st, fr, fw, req.Watch)
	case agentproto.OpMove:
		err = move(fw, req.Move, s.opts.User)
	case agentproto.OpTrustCA:
		err = s.trustCA(fw, req.TrustCA)
	}
	if err != nil {
		s.fail(fw, req.Op, err)
	}
}

// fail reports err to the host as a FrameError (best effort) and logs it.
func (s *server) fail(fw *agentproto.Writer, op agentproto.Op, err error) {
	pe := toProtoError(err)
	s.log.Warn("operation failed", "op", string(op), "code", string(pe.Code), "err", pe.Message)
	_ = fw.WriteJSON(agentproto.FrameError, pe)
}

func (s *server) setTime(fw *agentproto.Writer, req *agentproto.SetTimeRequest) error {
	set := s.opts.SetClock
	if set == nil {
		set = setRealtimeClock
	}
	if err := set(time.Unix(0, req.UnixNs)); err != nil {
		return fmt.Errorf("set clock: %w", err)
	}
	return fw.WriteJSON(agentproto.FrameResponse, agentproto.Empty{})
}

func (s *server) shutdown(st *yamux.Stream, fw *agentproto.Writer, req *agentproto.ShutdownRequest) error {
	if s.opts.Shutdown == nil {
		return &agentproto.Error{Code: agentproto.CodeUnsupported, Message: "shutdown is not enabled in this agent"}
	}
	if err := fw.WriteJSON(agentproto.FrameResponse, agentproto.Empty{}); err != nil {
		return err
	}
	st.Close()
	s.log.Info("shutdown requested", "reboot", req.Reboot)
	s.opts.Shutdown(req.Reboot)
	return nil
}
