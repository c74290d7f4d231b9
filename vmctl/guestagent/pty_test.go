package guestagent_test

import (
	"context"
	"errors"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// syncBuffer collects a command's output for polling while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ttySession is a command on a terminal with a pipe for its input.
type ttySession struct {
	p   *agent.Process
	in  *io.PipeWriter
	out *syncBuffer
}

func startTty(t *testing.T, c *agent.Client, req agentproto.ExecRequest, size agentproto.TtySize) *ttySession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	req.Tty = &size
	r, w := io.Pipe()
	t.Cleanup(func() { w.Close() })
	out := &syncBuffer{}
	p, err := c.Start(ctx, req, r, out, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return &ttySession{p: p, in: w, out: out}
}

// waitOutput waits until the output matches re and returns the match.
func (s *ttySession) waitOutput(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	testenv.WaitFor(t, 20*time.Second, "output matching "+re, func() bool {
		m = rx.FindStringSubmatch(s.out.String())
		return m != nil
	})
	return m
}

func (s *ttySession) send(t *testing.T, text string) {
	t.Helper()
	if _, err := s.in.Write([]byte(text)); err != nil {
		t.Fatalf("stdin: %v", err)
	}
}

func TestTtyIsATerminal(t *testing.T) {
	c, _ := newClient(t)
	s := startTty(t, c, argv("sh", "-c", `tty; stty size; echo "TERM=$TERM"; test -t 0 && test -t 1 && test -t 2 && echo all-tty`), agentproto.TtySize{Rows: 37, Cols: 101})
	st, err := s.p.Wait()
	if err != nil || st != (agentproto.ExitStatus{Code: 0}) {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
	// The terminal's ONLCR turns every \n into \r\n.
	if !regexp.MustCompile(`^/dev/pts/[0-9]+\r\n37 101\r\nTERM=xterm-256color\r\nall-tty\r\n$`).MatchString(s.out.String()) {
		t.Fatalf("output %q", s.out.String())
	}
}

func TestTtyTermFromEnv(t *testing.T) {
	c, _ := newClient(t)
	req := argv("sh", "-c", `echo "$TERM"`)
	req.Env = []string{"TERM=vt100"}
	s := startTty(t, c, req, agentproto.TtySize{Rows: 24, Cols: 80})
	if _, err := s.p.Wait(); err != nil || s.out.String() != "vt100\r\n" {
		t.Fatalf("output %q, err %v", s.out.String(), err)
	}
}

func TestTtyResize(t *testing.T) {
	c, _ := newClient(t)
	// The shell prints the size, waits for a line, prints it again; the
	// WINCH trap shows the signal arrived (it interrupts read, hence the
	// loop).
	s := startTty(t, c, argv("sh", "-c", `trap 'echo winch' WINCH; stty size; until read x; do :; done; stty size`), agentproto.TtySize{Rows: 24, Cols: 80})
	s.waitOutput(t, `^24 80\r\n`)
	if err := s.p.Resize(agentproto.TtySize{Rows: 50, Cols: 132}); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	s.waitOutput(t, `winch\r\n`)
	s.send(t, "go\n")
	if st, err := s.p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
	if !strings.HasSuffix(s.out.String(), "go\r\n50 132\r\n") {
		t.Fatalf("output %q", s.out.String())
	}
	if err := s.p.Resize(agentproto.TtySize{Rows: 1, Cols: 1}); !errors.Is(err, agent.ErrProcessDone) {
		t.Fatalf("Resize after exit: %v, want ErrProcessDone", err)
	}
}

func TestTtyCtrlCInterrupts(t *testing.T) {
	c, _ := newClient(t)
	// An interactive-like shell: sleep in the foreground, the shell
	// survives ^C (its trap) and goes on. "ready" comes from the
	// foreground child itself, so the ^C cannot arrive before it runs
	// (the shell would take it alone, and sleep the full 100 s).
	s := startTty(t, c, argv("sh", "-c", `trap 'echo interrupted' INT; sh -c 'echo ready; exec sleep 100'; echo survived; read x; echo "got $x"`), agentproto.TtySize{Rows: 24, Cols: 80})
	s.waitOutput(t, `ready\r\n`)
	start := time.Now()
	s.send(t, "\x03") // the byte, not a signal: the terminal makes SIGINT of it
	s.waitOutput(t, `\^C(interrupted\r\n)?survived\r\n`)
	s.send(t, "more\n")
	st, err := s.p.Wait()
	if err != nil || st.Code != 0 {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
	if time.Since(start) > 50*time.Second {
		t.Fatal("sleep 100 was not interrupted")
	}
	if !strings.HasSuffix(s.out.String(), "more\r\ngot more\r\n") {
		t.Fatalf("output %q", s.out.String())
	}

	// A command alone on the terminal dies of the SIGINT.
	s = startTty(t, c, argv("sleep", "100"), agentproto.TtySize{Rows: 24, Cols: 80})
	testenv.WaitFor(t, 20*time.Second, "sleep on the terminal", func() bool { s.send(t, "\x03"); return waitDone(s.p, 100*time.Millisecond) })
	if st, err := s.p.Wait(); err != nil || st != (agentproto.ExitStatus{Code: -1, Signal: 2}) {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
}

// waitDone reports whether p ended within d.
func waitDone(p *agent.Process, d time.Duration) bool {
	done := make(chan struct{})
	go func() { p.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func TestTtyOutputDrainedAfterExit(t *testing.T) {
	c, _ := newClient(t)
	// 200 KiB written just before exit all arrive.
	s := startTty(t, c, argv("sh", "-c", `head -c 204800 /dev/zero | tr '\0' x; exit 7`), agentproto.TtySize{Rows: 24, Cols: 80})
	st, err := s.p.Wait()
	if err != nil || st != (agentproto.ExitStatus{Code: 7}) {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
	if got := strings.Count(s.out.String(), "x"); got != 204800 {
		t.Fatalf("got %d bytes of output, want 204800", got)
	}
}

func TestResizeWithoutTty(t *testing.T) {
	c, _ := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, w := io.Pipe()
	defer w.Close()
	p, err := c.Start(ctx, argv("cat"), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Resize(agentproto.TtySize{Rows: 10, Cols: 10})
	var pe *agentproto.Error
	if !errors.As(err, &pe) || pe.Code != agentproto.CodeInvalid || !strings.Contains(pe.Message, "without a terminal") {
		t.Fatalf("Resize of a command without a terminal: %v, want CodeInvalid", err)
	}
	w.Close()
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("Wait: %+v, %v", st, err)
	}

	// A zero size is refused before anything is sent.
	s := startTty(t, c, argv("sh", "-c", "read x"), agentproto.TtySize{Rows: 24, Cols: 80})
	if err := s.p.Resize(agentproto.TtySize{Rows: 0, Cols: 80}); !errors.As(err, &pe) || pe.Code != agentproto.CodeInvalid {
		t.Fatalf("Resize to 0x80: %v, want CodeInvalid", err)
	}
	s.send(t, "\n")
	s.p.Wait()

	// So is a zero start size.
	req := argv("true")
	req.Tty = &agentproto.TtySize{Rows: 24}
	if _, err := c.Start(ctx, req, nil, nil, nil); !errors.As(err, &pe) || pe.Code != agentproto.CodeInvalid {
		t.Fatalf("Start with a 24x0 terminal: %v, want CodeInvalid", err)
	}
}
