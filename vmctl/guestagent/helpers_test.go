package guestagent_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
)

// testAgent is a guest agent served on one end of a socket pair.
type testAgent struct {
	host, guest net.Conn
	served      chan error
	clock       chan time.Time
	shutdown    chan bool
}

// startGuest runs Serve on a fresh socket pair; the test ends by checking
// that Serve returned nil after the host side closed.
func startGuest(t testing.TB, opts guestagent.Options) *testAgent {
	t.Helper()
	ta := &testAgent{served: make(chan error, 1), clock: make(chan time.Time, 1), shutdown: make(chan bool, 1)}
	ta.host, ta.guest = testenv.SocketPair(t)
	if opts.Version == "" {
		opts.Version = "test-1.0"
	}
	if opts.SetClock == nil {
		opts.SetClock = func(tm time.Time) error { ta.clock <- tm; return nil }
	}
	go func() { ta.served <- guestagent.Serve(context.Background(), ta.guest, opts) }()
	return ta
}

// newClient starts a guest agent and dials it.
func newClient(t *testing.T) (*agent.Client, *testAgent) {
	t.Helper()
	return newClientOpts(t, guestagent.Options{Shutdown: func(reboot bool) {}})
}

// newClientOpts is newClient with the agent's options.
func newClientOpts(t testing.TB, opts guestagent.Options) (*agent.Client, *testAgent) {
	t.Helper()
	ta := startGuest(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, ta.host, agent.Options{})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		if err := <-ta.served; err != nil {
			t.Errorf("Serve returned %v after the host closed", err)
		}
	})
	return c, ta
}

// result is the outcome of one exec.
type result struct {
	status agentproto.ExitStatus
	stdout string
	stderr string
	err    error
}

func run(t *testing.T, c *agent.Client, req agentproto.ExecRequest, stdin []byte) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	var in *bytes.Reader
	if stdin != nil {
		in = bytes.NewReader(stdin)
	}
	var st agentproto.ExitStatus
	var err error
	if in != nil {
		st, err = c.Exec(ctx, req, in, &out, &errb)
	} else {
		st, err = c.Exec(ctx, req, nil, &out, &errb)
	}
	return result{st, out.String(), errb.String(), err}
}

func argv(a ...string) agentproto.ExecRequest { return agentproto.ExecRequest{Argv: a} }

// waitGone polls until process pid no longer exists (it must be killed and
// reaped by the agent's reaper, which runs asynchronously on SIGCHLD).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			state, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Fatalf("process %d still exists: %s", pid, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// children returns the pids of this process's children (zombies included),
// with their state letter.
func children(t *testing.T) map[int]string {
	t.Helper()
	self := os.Getpid()
	out := map[int]string{}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(self) {
			out[pid] = f[0]
		}
	}
	return out
}
