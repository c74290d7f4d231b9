package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/revert"
)

// Build is a sandbox on its way to running: made by NewBuild and advanced
// by Run through lists of named Steps (firecracker-go-sdk's handler list
// is the model). Every step registers the undo of what it made in Undo, so
// a failed step undoes exactly what ran, newest first. Create runs one
// list; a restore (vmctl/sandbox/snapshot) runs its own, and a warm pool
// (vmctl/sandbox/warm) keeps builds half-run between two Runs.
type Build struct {
	// Sandbox is the sandbox being made (state creating until
	// StepRunning).
	Sandbox *Sandbox
	// Spec is its domain description; steps fill it in (StepNetwork adds
	// the NIC, StepDomain the limits).
	Spec domain.Spec
	// Undo holds the undos of what the steps made.
	Undo *revert.List
	// Started is when StepDomain began to start the domain; BootTime is
	// measured from it.
	Started time.Time
	// Agent is the guest agent connection StepAgent made.
	Agent *agent.Client
	// Times are a restore's step times; StepRunning keeps them for
	// Sandbox.LastRestore.
	Times RestoreTimes

	m *Manager
}

// Step is one named step of a Build: Run makes one thing and registers
// its undo in b.Undo.
type Step struct {
	// Name is the step's name in errors ("create step <name>: …").
	Name string
	// Run does the step.
	Run func(ctx context.Context, b *Build) error
}

// StepError is the error of a failed step of a Build: its text is
// "<op> step <name>: <err>", except when the step refused the request
// (invalid input, a name taken, no capacity, a failed precondition): then
// it is the reason alone, which the client acts on, and the step is for
// logs and the audit (FailedStep).
type StepError struct {
	Op, Step string
	Err      error
}

// Error implements error.
func (e *StepError) Error() string {
	if callerFault(e.Err) {
		return e.Err.Error()
	}
	return fmt.Sprintf("%s step %s: %v", e.Op, e.Step, e.Err)
}

// Unwrap returns the step's error.
func (e *StepError) Unwrap() error { return e.Err }

// callerFault reports whether err refuses the request rather than
// failing it: the caller has something to change.
func callerFault(err error) bool {
	for _, c := range []error{errdefs.ErrInvalidArgument, errdefs.ErrAlreadyExists, errdefs.ErrResourceExhausted, errdefs.ErrFailedPrecondition, errdefs.ErrNotFound} {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// FailedStep returns the name of the build step err failed in ("" when
// err is not a step's).
func FailedStep(err error) string {
	var se *StepError
	if errors.As(err, &se) {
		return se.Step
	}
	return ""
}

// Run runs steps in order. The first failure ends it with a *StepError
// ("<op> step <name>: <err>"; see there), after every undo the build registered (in
// this Run and earlier ones) ran under context.WithoutCancel(ctx), their
// errors joined in.
func (b *Build) Run(ctx context.Context, op string, steps ...Step) error {
	for _, s := range steps {
		if err := s.Run(ctx, b); err != nil {
			err = &StepError{Op: op, Step: s.Name, Err: err}
			if uerr := b.Undo.Fail(ctx); uerr != nil {
				err = errors.Join(err, uerr)
			}
			return err
		}
	}
	return nil
}

// Abort undoes everything the build made (a warm pool member nobody
// takes) and returns the undos' errors joined.
func (b *Build) Abort(ctx context.Context) error { return b.Undo.Fail(ctx) }

// Done hands what the build made to its sandbox: nothing is undone any
// more.
func (b *Build) Done() { b.Undo.Success() }

// Shape is what NewBuild makes a sandbox of.
type Shape struct {
	// Image is the image the sandbox boots or was saved on. Required.
	Image *image.Image
	// Accel is the accelerator its domain runs with.
	Accel accel.Choice
	// VCPUs and MemoryMiB are the domain's resources (MiB), resolved.
	VCPUs, MemoryMiB int
	// GuestAgentChannel gives the sandbox a qemu-ga socket.
	GuestAgentChannel bool
	// SharedMemory is set by a clone of a memory template: the guest RAM
	// it maps from the template's RAM file (admission counts it once per
	// template; sharedmem.go). nil for every other build.
	SharedMemory *SharedMemory
	// From, if set, is the record the new one starts from (a snapshot's
	// source, a warm template's sandbox), so what other parts keep there
	// (resource limits, network policy) carries over; identity, paths,
	// times, spec, network attachment and the limits' enforcement are the
	// new sandbox's own.
	From *Record
}

// NewBuild makes the Sandbox of a new build: a fresh ID, its domain name
// and paths, and its record in state creating. Nothing exists on the host
// yet. Errors: ErrInvalid when the runtime dir is too long for a socket
// path.
func (m *Manager) NewBuild(s Shape) (*Build, error) {
	id, err := NewID()
	if err != nil {
		return nil, err
	}
	sb := linked(&Sandbox{
		ID:     id,
		Domain: DomainPrefix + id,
		Dir:    filepath.Join(SandboxesDir(m.cfg.StateDir), id),
		Image:  s.Image,
		Accel:  s.Accel,
		VCPUs:  s.VCPUs,
		Memory: s.MemoryMiB,
		Shared: s.SharedMemory.clone(),
		obs:    observer{m},
		log:    m.log,
		life:   newLife(),
	})
	sb.Overlay = filepath.Join(sb.Dir, "overlay.qcow2")
	sb.ConsoleLog = filepath.Join(sb.Dir, "console.log")
	sb.AgentSocket = filepath.Join(m.cfg.RuntimeDir, id+".sock")
	if s.GuestAgentChannel {
		sb.GuestAgentSocket = filepath.Join(m.cfg.RuntimeDir, id+".qga.sock")
	}
	if len(sb.AgentSocket) > 100 {
		return nil, fmt.Errorf("%w: runtime dir %s is too long for a unix socket path (max ~100 bytes): choose a shorter --runtime-dir", ErrInvalid, m.cfg.RuntimeDir)
	}
	var r Record
	if s.From != nil {
		r = *s.From
		r.Reason, r.StartedAt, r.StoppedAt, r.BootMs = "", time.Time{}, time.Time{}, 0
		r.Spec, r.Network = nil, nil
		r.Ports = nil                          // the source's forwards hold their host addresses
		r.Resources = r.Resources.forRestore() // our own copy, without the source's enforcement and cgroups
		r.QEMUUser = nil                       // StepRegister gives the new sandbox its own
		r.OverlayFile = nil                    // the new sandbox's overlay is a file of its own
	}
	r.ID, r.Name, r.State, r.Domain, r.Labels, r.Extra = id, "", StateCreating, sb.Domain, nil, nil
	r.Template = "" // StepRegister sets the new sandbox's own
	r.ImageName, r.ImageDigest, r.ImageDir = s.Image.Manifest.Name, s.Image.Digest, s.Image.Dir
	r.Accel, r.DomainType = string(s.Accel.Accel), s.Accel.DomainType
	r.VCPUs, r.MemoryMiB = sb.VCPUs, sb.Memory
	r.SharedMemory = sb.Shared.clone() // not the source's: a restore does not map a template
	r.Dir, r.Overlay, r.ConsoleLog, r.AgentSocket = sb.Dir, sb.Overlay, sb.ConsoleLog, sb.AgentSocket
	r.CreatedAt = time.Now().UTC()
	sb.rec = r
	return &Build{Sandbox: sb, Undo: revert.New(), m: m}, nil
}

// Admission is what StepRegister gives a build: the user's name, labels
// and extra data, and the admission check.
type Admission struct {
	// Name, Labels, Extra and Admit are as in Options.
	Name   string
	Labels map[string]string
	Extra  []byte
	Admit  func(r Resources) error
	// Template and Tenant are as in Options.
	Template string
	Tenant   string
}

// StepRegister ("register") names the sandbox, adds it to the registry
// (name reserved, a.Admit checked) and writes its durable record.
// Errors: ErrNameTaken, a.Admit's, the Store's.
func StepRegister(a Admission) Step {
	return Step{Name: "register", Run: func(ctx context.Context, b *Build) error {
		sb, m := b.Sandbox, b.m
		sb.Name, sb.Labels = a.Name, maps.Clone(a.Labels)
		sb.mu.Lock()
		sb.rec.Name, sb.rec.Labels, sb.rec.Extra = sb.Name, sb.Labels, append([]byte(nil), a.Extra...)
		sb.rec.Template, sb.rec.Tenant = a.Template, a.Tenant
		sb.rec.CreatedAt = time.Now().UTC()
		sb.mu.Unlock()
		sb.loadAccount()
		if err := m.register(sb, a.Admit); err != nil {
			return err
		}
		b.Undo.Add("registry", func(context.Context) error { m.unregister(sb); return nil })
		if err := m.store(sb.Record()); err != nil {
			return err
		}
		b.Undo.Add("record", func(context.Context) error { return m.unstore(sb.ID) })
		return nil
	}}
}

// StepDir ("dir") makes the sandbox's directory (mode 0700); its undo
// removes it with everything in it.
func StepDir() Step {
	return Step{Name: "dir", Run: func(ctx context.Context, b *Build) error {
		sb := b.Sandbox
		if err := os.MkdirAll(filepath.Dir(sb.Dir), 0o700); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		if err := os.Mkdir(sb.Dir, 0o700); err != nil {
			return fmt.Errorf("sandbox dir: %w", err)
		}
		b.Undo.Add("sandbox dir", func(context.Context) error { return os.RemoveAll(sb.Dir) })
		return nil
	}}
}

// StepNetwork ("network") gives the sandbox its network for policy and
// puts it into b.Spec (see attachNetwork).
func StepNetwork(policy netpolicy.Policy) Step {
	return Step{Name: "network", Run: func(ctx context.Context, b *Build) error {
		return b.m.attachNetwork(ctx, b.Sandbox, policy, &b.Spec, b.Undo)
	}}
}

// StepDomain ("domain") watches the sandbox's domain, then starts it from
// b.Spec with start (the Driver's StartDomain, or a Snapshotter's
// StartDomainPaused) through Limits.Start, which puts the host-side
// limits in force, and records the spec it started with. Its undo
// destroys the domain and removes its sockets and cgroups.
func StepDomain(start func(context.Context, domain.Spec) error) Step {
	return Step{Name: "domain", Run: func(ctx context.Context, b *Build) error {
		sb, m := b.Sandbox, b.m
		if err := m.watch(sb); err != nil {
			return err
		}
		b.Undo.Add("domain watch", func(context.Context) error { sb.unwatch(); return nil })
		if err := m.confine(sb, &b.Spec); err != nil { // qemuuser.go
			return err
		}
		b.Started = time.Now()
		lim, err := m.cfg.Limits.Start(ctx, sb, &b.Spec, start)
		if err != nil {
			return err
		}
		b.Undo.Add("domain", func(ctx context.Context) error {
			err := m.cfg.Driver.DestroyDomain(ctx, sb.Domain)
			removeFiles(sb.AgentSocket, sb.GuestAgentSocket)
			m.cfg.Limits.Release(sb)
			return err
		})
		spec := b.Spec
		sb.mu.Lock()
		if lim != nil {
			sb.rec.Resources = lim
		}
		sb.rec.Spec = &spec // for snapshots of this sandbox
		sb.mu.Unlock()
		return nil
	}}
}

// StepAgent ("agent") connects to the guest agent and runs its
// handshake, failing early when the domain stops (ErrGuestDied with the
// console's last lines) and after timeout (ErrBootTimeout).
func StepAgent(timeout time.Duration) Step {
	return Step{Name: "agent", Run: func(ctx context.Context, b *Build) error {
		c, err := b.Sandbox.connectAgent(ctx, timeout)
		if err != nil {
			return err
		}
		b.Undo.Add("agent", func(context.Context) error { return c.Close() })
		b.Agent = c
		return nil
	}}
}

// StepRunning ("running") hands the agent connection to the sandbox,
// records its boot time (since b.Started) and b.Times, and marks it
// running.
func StepRunning() Step {
	return Step{Name: "running", Run: func(ctx context.Context, b *Build) error {
		sb := b.Sandbox
		sb.BootTime = time.Since(b.Started)
		sb.mu.Lock()
		sb.agent = b.Agent
		sb.rec.BootMs = sb.BootTime.Milliseconds()
		sb.restoreTimes = b.Times
		sb.mu.Unlock()
		sb.watchAgent(b.Agent)
		return sb.setState(StateRunning, "")
	}}
}

// connectAgent dials the agent socket and runs the handshake, failing early
// when the domain stops and after timeout.
func (sb *agentConn) connectAgent(ctx context.Context, timeout time.Duration) (*agent.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		c   *agent.Client
		err error
	}
	done := make(chan result, 1)
	stopped := sb.Stopped()
	go func() {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", sb.AgentSocket)
		if err != nil {
			done <- result{nil, fmt.Errorf("connect to agent socket: %w", err)}
			return
		}
		c, err := agent.Dial(ctx, conn, agent.Options{})
		if err != nil {
			conn.Close()
		}
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			return r.c, nil
		}
		// The handshake's reads carry ctx's deadline, so they may time out
		// a moment before ctx itself says so.
		if ctx.Err() == context.DeadlineExceeded || errors.Is(r.err, context.DeadlineExceeded) || errors.Is(r.err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("%w: guest agent did not answer within %s (a TCG boot takes seconds: raise --boot-timeout if the host is busy); console:\n%s", ErrBootTimeout, timeout, ConsoleTail(sb.ConsoleLog, 20))
		}
		// A connection that breaks during boot usually means QEMU exited:
		// give the lifecycle event a moment so the error says why.
		select {
		case <-stopped:
			return nil, sb.StopErr()
		case <-time.After(stopEventGrace):
			return nil, fmt.Errorf("guest agent handshake: %w", r.err)
		}
	case <-stopped:
		cancel()
		if r := <-done; r.c != nil {
			r.c.Close()
		}
		return nil, sb.StopErr()
	}
}

// RestoreTimes break a restore's duration down (for logs and benchmarks).
type RestoreTimes struct {
	// Copy is the copy of the qcow2 file; SourcePause the part of it the
	// source sandbox was paused for (0 when it did not run).
	Copy, SourcePause time.Duration
	// Start, Load and Resume are the paused domain start, the snapshot
	// load and the resume; Agent the handshake, clock and identity.
	Start, Load, Resume, Agent time.Duration
}
