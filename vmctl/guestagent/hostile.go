//go:build hostile

package guestagent

// The hostile guest agent: a test build (go build -tags hostile
// ./cmd/agentbox-guest) for the isolation suite's "hostile guest agent"
// section (tests/isolation/hostile_test.go). It is the real agent, so a
// sandbox of its image boots and serves as usual, until the host runs
//
//	agentbox-hostile ATTACK [N]
//
// in it: that exec is not run but answered by the attack on the host's
// side of the protocol, as a guest whose root was taken could do:
//
//	ping-flood N     stops reading, then sends N yamux ping requests (default 100000)
//	stream-flood N   N guest-opened yamux streams (default 10000)
//	bad-version      a yamux frame of version 1
//	oversize         a data frame header announcing 2 GiB
//	garbage          64 KiB of bytes that are no yamux frame
//	stop-reading     the exec is answered (exit 0), then the agent reads nothing more
//	endless-list     armed (exit 0): every later listing streams entries without end
//	many-procs N     armed (exit 0): every later proc-list claims N processes (default 25000)
//
// The attacks that break the session do not answer the exec. Nothing of
// this is in any other build (serve.go's hostile is nil there).

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

func init() { hostile = &hostileAgent{} }

// Frame types and flags of yamux (hashicorp/yamux spec.md).
const (
	yamuxData         = 0
	yamuxWindowUpdate = 1
	yamuxPing         = 2
	yamuxFlagSYN      = 1
)

// hostileAgent holds the armed misbehaviours and the current session's
// connection.
type hostileAgent struct {
	mu       sync.Mutex
	conn     *hostileConn
	endless  bool // endless-list armed
	manyProc int  // many-procs armed: how many
}

// hostileConn is the connection under the yamux server: it writes raw
// frames between yamux's (which writes a frame's header and body in two
// calls from one goroutine) and can stop reading.
type hostileConn struct {
	io.ReadWriteCloser
	wmu   sync.Mutex
	rem   int // body bytes left of the frame yamux is writing (wmu held)
	stall chan struct{}
	once  sync.Once
	done  chan struct{}
}

func (h *hostileAgent) session(c io.ReadWriteCloser) io.ReadWriteCloser {
	hc := &hostileConn{ReadWriteCloser: c, stall: make(chan struct{}), done: make(chan struct{})}
	h.mu.Lock()
	h.conn = hc
	h.mu.Unlock()
	return hc
}

func (c *hostileConn) Read(p []byte) (int, error) {
	select {
	case <-c.stall:
		<-c.done // read nothing more until the session is closed
		return 0, io.ErrClosedPipe
	default:
	}
	return c.ReadWriteCloser.Read(p)
}

func (c *hostileConn) Write(p []byte) (int, error) {
	if c.rem == 0 {
		c.wmu.Lock()
		if len(p) >= yamuxHeaderSize && p[1] == yamuxData {
			c.rem = int(binary.BigEndian.Uint32(p[8:12]))
		}
		n, err := c.ReadWriteCloser.Write(p)
		if c.rem == 0 {
			c.wmu.Unlock()
		}
		return n, err
	}
	n, err := c.ReadWriteCloser.Write(p)
	c.rem -= len(p)
	if c.rem <= 0 || err != nil {
		c.rem = 0
		c.wmu.Unlock()
	}
	return n, err
}

func (c *hostileConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.ReadWriteCloser.Close()
}

// raw writes b between yamux's frames.
func (c *hostileConn) raw(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.ReadWriteCloser.Write(b)
	return err
}

// frame returns a yamux frame header.
func frame(version, typ byte, flags uint16, stream, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[0], h[1] = version, typ
	binary.BigEndian.PutUint16(h[2:4], flags)
	binary.BigEndian.PutUint32(h[4:8], stream)
	binary.BigEndian.PutUint32(h[8:12], length)
	return h
}

// flood writes n frames made by mk, 1024 to a write, until a write fails
// (the host closed the session).
func (c *hostileConn) flood(n int, mk func(i int) []byte) {
	var buf []byte
	for i := range n {
		buf = append(buf, mk(i)...)
		if len(buf) >= 1024*yamuxHeaderSize || i == n-1 {
			if c.raw(buf) != nil {
				return
			}
			buf = buf[:0]
		}
	}
}

func (h *hostileAgent) handle(fw *agentproto.Writer, req agentproto.Request) bool {
	h.mu.Lock()
	c, endless, many := h.conn, h.endless, h.manyProc
	h.mu.Unlock()
	switch {
	case req.Op == agentproto.OpList && endless:
		h.endlessList(fw)
		return true
	case req.Op == agentproto.OpProcList && many > 0 && req.ProcList.ID == "":
		h.claimProcs(fw, many)
		return true
	case req.Op != agentproto.OpExec || len(req.Exec.Argv) < 2 || req.Exec.Argv[0] != "agentbox-hostile":
		return false
	}
	n := 0
	if len(req.Exec.Argv) > 2 {
		n, _ = strconv.Atoi(req.Exec.Argv[2])
	}
	answer := func() {
		_ = fw.WriteJSON(agentproto.FrameStarted, agentproto.Started{Pid: 1})
		_ = fw.WriteJSON(agentproto.FrameExit, agentproto.ExitStatus{Code: 0})
	}
	switch attack := req.Exec.Argv[1]; attack {
	case "ping-flood":
		close(c.stall) // and never read the answers
		c.flood(cmp(n, 100000), func(i int) []byte { return frame(0, yamuxPing, yamuxFlagSYN, 0, uint32(i)) })
	case "stream-flood":
		// A server's streams have even IDs (yamux spec.md).
		c.flood(cmp(n, 10000), func(i int) []byte { return frame(0, yamuxWindowUpdate, yamuxFlagSYN, uint32(2*i+2), 0) })
	case "bad-version":
		_ = c.raw(frame(1, yamuxPing, yamuxFlagSYN, 0, 1))
	case "oversize":
		_ = c.raw(frame(0, yamuxData, 0, 1, 1<<31))
	case "garbage":
		b := make([]byte, 64<<10)
		rand.Read(b)
		b[0] = 0xff // neither a yamux version nor a hello's magic
		_ = c.raw(b)
	case "stop-reading":
		answer()
		// The answer's frames leave before reads stop being served: give
		// yamux's send loop a moment, then stall.
		time.Sleep(100 * time.Millisecond)
		close(c.stall)
	case "endless-list":
		h.mu.Lock()
		h.endless = true
		h.mu.Unlock()
		answer()
	case "many-procs":
		h.mu.Lock()
		h.manyProc = cmp(n, 25000)
		h.mu.Unlock()
		answer()
	default:
		_ = fw.WriteJSON(agentproto.FrameStarted, agentproto.Started{Pid: 1})
		_ = fw.WriteFrame(agentproto.FrameStderr, []byte(fmt.Sprintf("agentbox-hostile: unknown attack %q\n", attack)))
		_ = fw.WriteJSON(agentproto.FrameExit, agentproto.ExitStatus{Code: 2})
	}
	return true
}

// cmp is n, or def when n is not positive.
func cmp(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// endlessList answers a listing with batches of made-up entries until the
// host stops reading the stream.
func (h *hostileAgent) endlessList(fw *agentproto.Writer) {
	batch := make([]agentproto.FileInfo, listBatch)
	for i := 0; ; i++ {
		for j := range batch {
			batch[j] = agentproto.FileInfo{Name: fmt.Sprintf("f%09d", i*listBatch+j), Size: 1, Mode: 0o644, Type: agentproto.TypeFile}
		}
		if fw.WriteJSON(agentproto.FrameData, batch) != nil {
			return
		}
	}
}

// claimProcs answers a proc-list with n made-up running processes.
func (h *hostileAgent) claimProcs(fw *agentproto.Writer, n int) {
	list := agentproto.ProcList{Procs: make([]agentproto.ProcInfo, n)}
	for i := range list.Procs {
		list.Procs[i] = agentproto.ProcInfo{ID: fmt.Sprintf("fake%06d", i), Pid: 100000 + i, Argv: []string{"sleep", "1000"}, State: agentproto.ProcRunning}
	}
	_ = fw.WriteJSON(agentproto.FrameResponse, list)
}
