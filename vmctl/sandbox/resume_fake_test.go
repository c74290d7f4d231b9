package sandbox_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
)

// frozenResumeDriver is the fake driver whose ResumeDomain reports
// success but leaves the guest stopped: its agent does not answer.
type frozenResumeDriver struct{ *fakeDriver }

func (frozenResumeDriver) ResumeDomain(context.Context, string) error { return nil }

// releaseRecorder is the resources enforcer, recording which sandboxes'
// limits were released.
type releaseRecorder struct {
	sandbox.Limits
	mu       sync.Mutex
	released []string
}

func (r *releaseRecorder) Release(sb *sandbox.Sandbox) {
	r.mu.Lock()
	r.released = append(r.released, sb.ID)
	r.mu.Unlock()
	r.Limits.Release(sb)
}

// TestResumeInMemoryAgentSilentFake: a sandbox paused in memory by a
// daemon that restarted since is resumed by one with no agent connection
// yet; when the agent does not answer, the sandbox fails with the reason,
// its domain is destroyed and what it held on the host is released as at
// a stop: its resource limits (Limits.Release) and agent socket.
func TestResumeInMemoryAgentSilentFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	sb := f.create(t, "silent")
	defer f.mgr.Destroy(t0, sb)
	if err := f.mgr.Pause(t0, sb, false, "test"); err != nil {
		t.Fatal(err)
	}

	// The restarted daemon's manager, whose resumes leave the guest frozen.
	lim := &releaseRecorder{Limits: resources.New(fd, nil)}
	mgr, err := sandbox.NewManager(sandbox.Config{Driver: frozenResumeDriver{fd}, Limits: lim, StateDir: f.state, RuntimeDir: f.runtime, Store: f.st, Owner: f.st.Instance()})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := mgr.Reconcile(t0)
	if err != nil {
		t.Fatal(err)
	}
	again, err := mgr.Get(sb.ID)
	if err != nil || !slices.Contains(rep.Adopted, sb.ID) || again.State() != sandbox.StatePaused {
		t.Fatalf("reconcile: adopted %v, failed %v (%v); want %s adopted paused", rep.Adopted, rep.Failed, err, sb.ID)
	}
	err = mgr.Resume(t0, again, sandbox.ResumeOptions{Timeout: 500 * time.Millisecond})
	if err == nil {
		t.Fatal("resume of a guest whose agent does not answer succeeded")
	}
	if r := again.Record(); r.State != sandbox.StateFailed || !strings.Contains(r.Reason, "guest agent did not answer after resume") {
		t.Errorf("after the failed resume: %s (%s), want failed with the reason", r.State, r.Reason)
	}
	if d, _ := fd.dom(sb.Domain); d != nil {
		t.Error("the domain is left after the failed resume")
	}
	lim.mu.Lock()
	released := slices.Clone(lim.released)
	lim.mu.Unlock()
	if !slices.Equal(released, []string{sb.ID}) {
		t.Errorf("limits released for %v after the failed resume, want [%s]", released, sb.ID)
	}
	if _, err := os.Stat(sb.AgentSocket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("agent socket after the failed resume: %v, want it removed", err)
	}
}
