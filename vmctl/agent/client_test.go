package agent_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// fakeGuest answers the handshake on conn and then hands each stream's
// request to handle, over a real yamux server.
func fakeGuest(t *testing.T, conn net.Conn, handle func(req agentproto.Request, fr *agentproto.Reader, fw *agentproto.Writer)) {
	t.Helper()
	go func() {
		br := bufio.NewReader(conn)
		if _, err := agentproto.AcceptHello(br, conn, "fake"); err != nil {
			return
		}
		sess, err := yamux.Server(struct {
			io.Reader
			io.WriteCloser
		}{br, conn}, agentproto.YamuxConfig())
		if err != nil {
			return
		}
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				fr, fw := agentproto.NewReader(st), agentproto.NewWriter(st)
				var req agentproto.Request
				if err := fr.ReadJSON(agentproto.FrameRequest, &req); err != nil {
					return
				}
				handle(req, fr, fw)
			}()
		}
	}()
}

func TestDialVersionMismatch(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	go func() {
		h, err := agentproto.ReadHello(bufio.NewReader(guest))
		if err == nil {
			io.WriteString(guest, "AGENTBOX/7 ERR "+h.Nonce+" whatever\n")
		}
	}()
	_, err := agent.Dial(context.Background(), host, agent.Options{})
	if !errors.Is(err, agentproto.ErrVersionMismatch) {
		t.Fatalf("got %v", err)
	}
	want := "agent: handshake: agentproto: protocol version mismatch: guest agent speaks protocol 7, host 3: rebuild the image with a matching agentbox-guest"
	if err.Error() != want {
		t.Fatalf("message %q", err.Error())
	}
	if _, err := host.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("conn not closed after a failed Dial: %v", err)
	}
}

func TestGuestErrorsAndDisconnect(t *testing.T) {
	host, guest := net.Pipe()
	fakeGuest(t, guest, func(req agentproto.Request, fr *agentproto.Reader, fw *agentproto.Writer) {
		switch req.Op {
		case agentproto.OpStat:
			fw.WriteJSON(agentproto.FrameError, agentproto.Error{Code: agentproto.CodeNotFound, Message: "stat /x: no such file or directory"})
		case agentproto.OpPing:
			fw.WriteFrame(agentproto.FrameStdout, []byte("nonsense"))
		}
	})
	c, err := agent.Dial(context.Background(), host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.AgentVersion() != "fake" {
		t.Fatalf("version %q", c.AgentVersion())
	}
	_, err = c.Stat(context.Background(), "/x")
	var pe *agentproto.Error
	if !errors.As(err, &pe) || pe.Code != agentproto.CodeNotFound || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat: %v", err)
	}
	if err.Error() != "agent: stat /x: guest: not-found: stat /x: no such file or directory" {
		t.Fatalf("message %q", err.Error())
	}
	if _, err := c.Ping(context.Background()); err == nil || errors.Is(err, agent.ErrDisconnected) {
		t.Fatalf("Ping with a protocol violation: %v", err)
	}
	guest.Close()
	<-c.Done()
	if _, err := c.Ping(context.Background()); !errors.Is(err, agent.ErrDisconnected) {
		t.Fatalf("Ping after disconnect: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOperationContextDeadline(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	fakeGuest(t, guest, func(req agentproto.Request, fr *agentproto.Reader, fw *agentproto.Writer) {
		fr.ReadFrame() // never answers; returns when the host gives up
	})
	c, err := agent.Dial(context.Background(), host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Ping(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: "/a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

// TestExecCancelUnresponsiveGuest: the guest never reports an exit; Wait
// gives up KillGrace after the cancel, having asked for SIGKILL.
func TestExecCancelUnresponsiveGuest(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	killed := make(chan agentproto.SignalRequest, 1)
	testDone := make(chan struct{})
	defer close(testDone)
	fakeGuest(t, guest, func(req agentproto.Request, fr *agentproto.Reader, fw *agentproto.Writer) {
		switch req.Op {
		case agentproto.OpExec:
			fw.WriteJSON(agentproto.FrameStarted, agentproto.Started{Pid: 4242})
			for {
				if _, _, err := fr.ReadFrame(); err != nil {
					<-testDone // hold the stream open, never report an exit
					return
				}
			}
		case agentproto.OpSignal:
			killed <- *req.Signal
			fw.WriteJSON(agentproto.FrameResponse, agentproto.Empty{})
		}
	})
	c, err := agent.Dial(context.Background(), host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	p, err := c.Start(ctx, agentproto.ExecRequest{Argv: []string{"sleep", "1"}}, nil, nil, nil)
	if err != nil || p.Pid() != 4242 {
		t.Fatalf("Start: %v pid %d", err, p.Pid())
	}
	start := time.Now()
	cancel()
	if k := <-killed; k != (agentproto.SignalRequest{Pid: 4242, Signal: 9}) {
		t.Fatalf("signal request %+v", k)
	}
	st, err := p.Wait()
	if !errors.Is(err, context.Canceled) || st.Code != -1 {
		t.Fatalf("Wait: %+v %v", st, err)
	}
	if d := time.Since(start); d < agent.KillGrace {
		t.Fatalf("Wait returned after %v, before the grace period", d)
	}
}

func TestStartRejectsBadRequest(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	fakeGuest(t, guest, func(agentproto.Request, *agentproto.Reader, *agentproto.Writer) {})
	c, err := agent.Dial(context.Background(), host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Exec(context.Background(), agentproto.ExecRequest{}, nil, nil, nil)
	if !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("got %v", err)
	}
}
