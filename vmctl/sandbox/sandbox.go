package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/image"
)

// Sandbox is one virtual machine with its overlay and agent connection.
// The exported fields are fixed when the sandbox is made (Create or
// Reconcile); its lifecycle state changes and is read with State and
// Record. Its methods are declared on it and on its parts by concern
// (domainEnd, agentConn, guestProcs, portForwards, guestNet, pauseState,
// idleGate), whose methods are promoted: all are called on the Sandbox.
type Sandbox struct {
	// ID is 12 lowercase hex digits, unique per sandbox.
	ID string
	// Name is the user's unique name for it, or "".
	Name string
	// Labels are the user's key/value labels; do not modify.
	Labels map[string]string
	// Domain is the libvirt domain name: DomainPrefix + ID.
	Domain string
	// Dir is the sandbox's state directory (overlay, console log).
	Dir string
	// Overlay is the sandbox's qcow2 overlay; its backing file is the image's
	// read-only base disk.
	Overlay string
	// ConsoleLog is the file the guest's serial console is written to.
	ConsoleLog string
	// AgentSocket is the host end of the agent's virtio-serial port.
	AgentSocket string
	// GuestAgentSocket is the host end of qemu-ga's channel, or "".
	GuestAgentSocket string
	// Image is the image the sandbox booted; nil for a sandbox adopted by
	// Reconcile whose image directory is gone (ImageName etc. are in
	// Record).
	Image *image.Image
	// Accel is the accelerator the domain runs with.
	Accel accel.Choice
	// VCPUs and Memory (MiB) are the resources the domain got.
	VCPUs, Memory int
	// Shared is the guest RAM it maps from a memory template instead of
	// holding it (a clone; sharedmem.go), or nil. Set before the sandbox
	// is registered; cleared (under the Manager's lock and mu) when its
	// domain comes back without the mapping (Manager.unshare), never set
	// again.
	Shared *SharedMemory
	// BootTime is the time from domain start to the agent's handshake
	// (zero for an adopted sandbox whose record lacks it).
	BootTime time.Duration

	obs       observer // the Manager that made it
	log       *slog.Logger
	stopWatch context.CancelFunc // under mu; see unwatch

	// opMu serializes the changes that take a while (pause, resume,
	// start, stop, remove) on one sandbox (pause.go).
	opMu sync.Mutex

	mu           sync.Mutex
	reserved     bool        // admitted for a resume from disk or a start: its resources count (pause.go)
	life         *domainLife // the current domain's; replaced when it starts again (pause.go)
	rec          Record
	agent        *agent.Client
	restoreTimes RestoreTimes // see LastRestore

	acct execAccount // account.go

	// pmu serializes writes of the record to the Store, so the last write
	// is the newest record and none lands after Remove deleted it.
	pmu     sync.Mutex
	removed bool

	// The parts by concern, each a pointer back to this Sandbox (set by
	// linked): they share its fields and locks; their methods are
	// promoted.
	domainEnd    // this file: the domain's end and how callers hear of it
	agentConn    // this file, build.go, reseed.go, watch.go: the agent connection
	guestProcs   // procs.go: the guest's detached processes
	portForwards // ports.go: port forwards and guest connections
	guestNet     // network.go: the guest's network
	pauseState   // pause.go: the resources held, the operation lock, state checks
	idleGate     // idle.go: the idle action and what waits for it
}

// domainEnd is the end of a sandbox's domain: the watch for it (watch,
// unwatch, markStopped in reconcile.go), its channel (Stopped), and how
// it is told to callers (StopErr, NotRunning, Explain). It is a part of
// the Sandbox it points to (linked).
type domainEnd struct{ *Sandbox }

// agentConn is a sandbox's guest agent connection: who gets it (Agent),
// how it is made (connectAgent, build.go) and released, and the guest
// calls beyond guest.go's commands and files (Reseed, reseed.go; Watch,
// watch.go). It is a part of the Sandbox it points to (linked).
type agentConn struct{ *Sandbox }

// linked points sb's parts at sb and returns it. Every Sandbox this
// package makes is linked (NewBuild, fromRecord); an unlinked one (a
// test's literal) has only the methods declared on Sandbox itself.
func linked(sb *Sandbox) *Sandbox {
	sb.domainEnd = domainEnd{sb}
	sb.agentConn = agentConn{sb}
	sb.guestProcs = guestProcs{sb}
	sb.portForwards = portForwards{sb}
	sb.guestNet = guestNet{sb}
	sb.pauseState = pauseState{sb}
	sb.idleGate = idleGate{sb}
	return sb
}

// State returns the sandbox's current lifecycle state.
func (sb *Sandbox) State() State {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.rec.State
}

// Record returns a copy of the sandbox's durable record.
func (sb *Sandbox) Record() Record {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	r := sb.rec
	r.Labels = maps.Clone(r.Labels)
	r.Extra = append([]byte(nil), r.Extra...)
	r.Resources = r.Resources.clone()
	r.SharedMemory = r.SharedMemory.clone()
	return r
}

// Tenant returns the tenant that owns the sandbox (Record.Tenant), ""
// for the admin's.
func (sb *Sandbox) Tenant() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.rec.Tenant
}

// Agent returns the connected guest agent client, or nil when the sandbox
// is not running. All callers share the one connection; it multiplexes
// concurrent operations (yamux streams).
func (sb *agentConn) Agent() *agent.Client {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.rec.State != StateRunning {
		return nil
	}
	return sb.agent
}

// unwatch ends the watch of the sandbox's domain (see Manager.watch).
func (sb *domainEnd) unwatch() {
	sb.mu.Lock()
	f := sb.stopWatch
	sb.mu.Unlock()
	if f != nil {
		f()
	}
}

// domainLife is one run of a sandbox's domain: done is closed when that
// domain stopped for any reason, stop says why. A sandbox whose domain
// starts again (resume from disk, start) gets a new one, so a stop of the
// old domain never ends the new.
type domainLife struct {
	once sync.Once
	done chan struct{}
	stop Stop
}

func newLife() *domainLife { return &domainLife{done: make(chan struct{})} }

// end records st and closes done, once.
func (l *domainLife) end(st Stop) {
	l.once.Do(func() {
		l.stop = st
		close(l.done)
	})
}

// curLife returns the life of the sandbox's current (or last) domain.
func (sb *domainEnd) curLife() *domainLife {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.life
}

// Stopped is closed when the domain has stopped for any reason. A sandbox
// whose domain starts again (Resume from disk, Start) has a new channel:
// call Stopped again after those.
func (sb *domainEnd) Stopped() <-chan struct{} { return sb.curLife().done }

func (sb *domainEnd) stoppedNow() bool {
	select {
	case <-sb.Stopped():
		return true
	default:
		return false
	}
}

// transitions lists the allowed state changes (gVisor's requireStatus
// idea: every change is checked in one place).
var transitions = map[State][]State{
	StateCreating: {StateRunning, StateFailed, StateStopped},
	StateRunning:  {StateStopping, StateFailed, StateStopped, StatePaused},
	StatePaused:   {StateRunning, StateStopping, StateFailed, StateStopped},
	StateStopping: {StateStopped, StateFailed},
	StateStopped:  {StateCreating}, // Manager.Start
	StateFailed:   {StateCreating}, // Manager.Start
}

// setState moves the sandbox to state to with reason and tells the
// observer (which persists the record); running also starts the idle
// clock (started). Leaving paused clears Record.Paused unless the sandbox
// fails (the reason may need it); creating again (Start) clears the
// stop time. A change that transitions does not
// allow (e.g. from a final state) is refused with ErrConflict; setting the
// current state again is a no-op.
func (sb *Sandbox) setState(to State, reason string) error {
	sb.mu.Lock()
	from := sb.rec.State
	if from == to {
		sb.mu.Unlock()
		return nil
	}
	ok := false
	for _, s := range transitions[from] {
		ok = ok || s == to
	}
	if !ok {
		sb.mu.Unlock()
		return fmt.Errorf("%w: sandbox %s is %s, cannot become %s", ErrConflict, sb.ID, from, to)
	}
	sb.rec.State, sb.rec.Reason = to, reason
	now := time.Now().UTC()
	switch {
	case to == StateRunning && from == StatePaused:
		// resumed: the same run goes on
	case to == StateRunning:
		sb.rec.StartedAt = now
	case to.Final():
		sb.rec.StoppedAt = now
	case to == StateCreating:
		sb.rec.StoppedAt = time.Time{}
	}
	if from == StatePaused && to != StateFailed {
		sb.rec.Paused = nil
	}
	sb.mu.Unlock()
	if to == StateRunning {
		sb.started(now)
	}
	sb.persist()
	return nil
}

// persist tells the observer of the current record (it stores it),
// unless the sandbox was removed.
func (sb *Sandbox) persist() {
	sb.pmu.Lock()
	defer sb.pmu.Unlock()
	if !sb.removed {
		sb.obs.Changed(sb, sb.Record())
	}
}

// created returns the record's creation time.
func (sb *Sandbox) created() time.Time {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.rec.CreatedAt
}

// setResources records the sandbox's resolved limits.
func (sb *Sandbox) setResources(lim *ResourceLimits) {
	sb.mu.Lock()
	sb.rec.Resources = lim
	sb.mu.Unlock()
}

// diskBytes is the overlay's virtual size (0: the backing file's).
func (sb *Sandbox) diskBytes() uint64 {
	if r := sb.Record().Resources; r != nil {
		return uint64(r.DiskMiB) << 20
	}
	return 0
}

// LastRestore returns the step times of sb's restore (zero for a sandbox
// that was booted).
func (sb *Sandbox) LastRestore() RestoreTimes {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.restoreTimes
}

// setExtra replaces the exec accounting kept in the sandbox's record
// (Record.Extra) and persists the record.
func (sb *Sandbox) setExtra(extra []byte) {
	sb.mu.Lock()
	sb.rec.Extra = append([]byte(nil), extra...)
	sb.mu.Unlock()
	sb.persist()
}

// StopErr describes why the domain stopped, wrapping ErrGuestDied and
// carrying the last console lines; nil while it runs.
func (sb *domainEnd) StopErr() error {
	if !sb.stoppedNow() {
		return nil
	}
	console := ConsoleTail(sb.ConsoleLog, 20)
	reason := sb.curLife().stop.Reason
	if strings.Contains(console, "Kernel panic") {
		// With panic=-1 a panic reboots, which on_reboot=destroy turns into
		// an ordinary stop: the console says what it was.
		reason = "kernel panic, " + reason
	}
	if strings.TrimSpace(console) == "" {
		return fmt.Errorf("%w (domain %s %s) before the kernel printed anything: check that --memory (%d MiB) fits the kernel and initrd, and the image's kernel", ErrGuestDied, sb.Domain, reason, sb.Memory)
	}
	return fmt.Errorf("%w (domain %s %s); last console lines:\n%s", ErrGuestDied, sb.Domain, reason, console)
}

// watch ends life when the driver reports the domain's end and, for a
// sandbox that was running or paused in memory, records why: stopped when
// the guest shut itself down, failed otherwise (crash, panic, destroyed
// behind our back, vanished while libvirtd was away). The domain of a
// sandbox paused to disk was destroyed on purpose: its network stays.
func (sb *domainEnd) watch(stops <-chan Stop, life *domainLife) {
	st, ok := <-stops
	if !ok {
		return
	}
	life.end(st)
	r := sb.Record()
	if r.PausedToDisk() {
		return // Pause owns it; the tap and rules stay for the resume
	}
	sb.obs.DomainGone(sb.Sandbox) // the domain is gone
	if r.State != StateRunning && r.State != StatePaused {
		return // Create, Stop, Remove, Resume or Start own the change
	}
	to, reason := StateFailed, "domain stopped unexpectedly ("+st.Reason+")"
	switch {
	case strings.Contains(ConsoleTail(sb.ConsoleLog, 20), "Kernel panic"):
		reason = "guest kernel panic (" + st.Reason + ")"
	case st.Reason == "stopped/shutdown":
		to, reason = StateStopped, reasonPoweredOff
	}
	if err := sb.setState(to, reason); err == nil {
		sb.log.Warn("sandbox domain stopped", "sandbox", sb.ID, "domain", sb.Domain, "state", to, "reason", reason)
	}
	sb.release()
}

// release closes the agent connection and removes the sockets of a
// sandbox whose domain is gone.
func (sb *agentConn) release() {
	sb.mu.Lock()
	c := sb.agent
	sb.agent = nil
	sb.mu.Unlock()
	if c != nil {
		c.Close()
	}
	removeFiles(sb.AgentSocket, sb.GuestAgentSocket)
}

// NotRunning returns the ErrNotRunning error for the sandbox's current
// state (with the guest's death, ErrGuestDied, when its domain stopped
// without agentbox asking: see died), for the operations here and in the
// sub-packages that need a running sandbox.
func (sb *domainEnd) NotRunning() error {
	r := sb.Record()
	msg := fmt.Sprintf("sandbox %s is %s", sb.ID, r.State)
	if r.Reason != "" {
		msg += " (" + r.Reason + ")"
	}
	if sb.died() {
		return fmt.Errorf("%w: %s: %w", ErrNotRunning, msg, sb.StopErr())
	}
	return fmt.Errorf("%w: %s", ErrNotRunning, msg)
}

// died reports whether the sandbox's domain stopped and agentbox did not
// end it: not paused to disk, not being stopped or removed, not stopped
// by Stop (a guest that powered itself off did die for its callers).
func (sb *domainEnd) died() bool {
	if !sb.stoppedNow() {
		return false
	}
	r := sb.Record()
	switch r.State {
	case StatePaused, StateStopping:
		return false
	case StateStopped:
		return r.Reason == reasonPoweredOff
	}
	return true
}

// onPurpose reports whether the sandbox is not running because agentbox
// made it so (paused, stopping, stopped by Stop): a broken agent
// connection is then that, not the guest's death.
func (sb *domainEnd) onPurpose() bool {
	switch r := sb.Record(); r.State {
	case StatePaused, StateStopping:
		return true
	case StateStopped:
		return r.Reason != reasonPoweredOff
	}
	return false
}

// reasonPoweredOff is the reason of a sandbox whose guest shut itself
// down.
const reasonPoweredOff = "guest powered off"

// stopEventGrace is how long a broken agent connection waits for the
// domain's lifecycle event, which libvirt sends a little after QEMU exits.
const stopEventGrace = 2 * time.Second

// Explain turns err, seen on the agent connection, into the guest's death
// (ErrGuestDied with the console's last lines) when the domain stopped or
// stops within 2 s; otherwise it returns err unchanged, wrapped as a lost
// connection when it is agent.ErrDisconnected. A session the host ended
// for a protocol violation (agentproto.ErrProtocolViolation) is a lost
// connection at once, though its domain is destroyed for it.
func (sb *domainEnd) Explain(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, agentproto.ErrProtocolViolation) {
		// The host ended the session and destroys the domain for it: the
		// violation is the reason, not the domain's end that follows.
		return fmt.Errorf("guest agent connection lost: %w", err)
	}
	if !errors.Is(err, agent.ErrDisconnected) && !sb.stoppedNow() {
		return err
	}
	if sb.onPurpose() {
		return sb.NotRunning()
	}
	select {
	case <-sb.Stopped():
		return sb.StopErr()
	case <-time.After(stopEventGrace):
		return fmt.Errorf("guest agent connection lost: %w", err)
	}
}
