package sandbox_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
	"github.com/agentbox/agentbox/vmctl/store"
)

// pingFlooder is a guest that answers the handshake and then sends yamux
// pings (type 2, flag SYN) without reading the answers.
func pingFlooder(t *testing.T) *agent.Client {
	t.Helper()
	host, guest := net.Pipe()
	t.Cleanup(func() { guest.Close() })
	go func() {
		br := bufio.NewReader(guest)
		if _, err := agentproto.AcceptHello(br, guest, "hostile"); err != nil {
			return
		}
		h := make([]byte, 12)
		h[1], h[3] = 2, 1
		for n := uint32(0); ; n++ {
			binary.BigEndian.PutUint32(h[8:], n)
			if _, err := guest.Write(h); err != nil {
				return
			}
		}
	}()
	c, err := agent.Dial(t0, host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A guest that breaks the agent protocol fails its sandbox with the reason
// agent_protocol_violation, reported once to OnAgentViolation, and its
// domain goes with what it held on the host; another sandbox of the same
// manager goes on answering.
func TestAgentViolationFailsSandboxFake(t *testing.T) {
	fd := newFakeDriver(t)
	state, runtime := t.TempDir(), testenv.ShortTempDir(t)
	st, err := store.Open(filepath.Join(state, "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	type report struct {
		r sandbox.Record
		v error
	}
	var mu sync.Mutex
	var reports []report
	lim := &releaseRecorder{Limits: resources.New(fd, nil)}
	mgr, err := sandbox.NewManager(sandbox.Config{Driver: fd, Limits: lim, StateDir: state, RuntimeDir: runtime, Store: st, Owner: st.Instance(),
		OnAgentViolation: func(r sandbox.Record, v error) {
			mu.Lock()
			reports = append(reports, report{r, v})
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	img := fakeImage(t, "d1")
	create := func(name string) *sandbox.Sandbox {
		sb, err := mgr.Create(t0, sandbox.Options{Image: img, Accel: tcg, Name: name, BootTimeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		t.Cleanup(func() { mgr.Destroy(context.WithoutCancel(t0), sb) })
		return sb
	}
	victim, bystander := create("victim"), create("bystander")

	sandbox.SetAgentForTest(victim, pingFlooder(t))
	// Its failure ends with the network's teardown; the limits' release
	// comes just before.
	testenv.WaitFor(t, time.Minute, "the victim to fail and its limits to be released", func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return victim.State() == sandbox.StateFailed && len(lim.released) > 0
	})
	if r := victim.Record(); r.Reason != sandbox.ReasonProtocolViolation {
		t.Errorf("reason %q, want %q", r.Reason, sandbox.ReasonProtocolViolation)
	}
	mu.Lock()
	got := slices.Clone(reports)
	mu.Unlock()
	if len(got) != 1 || got[0].r.ID != victim.ID || got[0].r.State != sandbox.StateFailed || !errors.Is(got[0].v, agentproto.ErrProtocolViolation) ||
		!strings.Contains(got[0].v.Error(), "5 pings the host has not answered yet, more than the limit of 4") {
		t.Fatalf("reports %+v", got)
	}
	if d, _ := fd.dom(victim.Domain); d != nil {
		t.Error("the victim's domain is left")
	}
	lim.mu.Lock()
	released := slices.Clone(lim.released)
	lim.mu.Unlock()
	if !slices.Equal(released, []string{victim.ID}) {
		t.Errorf("limits released for %v, want [%s]", released, victim.ID)
	}
	if _, err := os.Stat(victim.AgentSocket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("agent socket: %v, want it removed", err)
	}
	if victim.Agent() != nil {
		t.Error("the victim keeps an agent connection")
	}
	if _, err := victim.Stat(t0, "/"); !errors.Is(err, sandbox.ErrNotRunning) || !strings.Contains(err.Error(), "failed ("+sandbox.ReasonProtocolViolation+")") {
		t.Errorf("stat of the failed victim: %v", err)
	}
	if bystander.State() != sandbox.StateRunning {
		t.Fatalf("bystander is %s", bystander.State())
	}
	if _, err := bystander.Stat(t0, "/"); err != nil {
		t.Errorf("bystander after the violation: %v", err)
	}
}
