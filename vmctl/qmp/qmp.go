// Package qmp speaks QEMU's machine protocol (QMP) to one domain's QEMU
// through a [Transport] — in agentbox the daemon's single libvirt
// connection (vmctl/libvirt.Conn: virDomainQemuMonitorCommand for commands,
// virConnectDomainQemuMonitorEventRegister for events). It knows nothing of
// libvirt or sandboxes.
//
// [Monitor] implements github.com/digitalocean/go-qemu's qmp.Monitor, so
// go-qemu's raw.Monitor (generated QAPI types) and qemu.Domain helpers work
// over it without the second, qemu:///system-only connection go-qemu's own
// LibvirtRPCMonitor opens. Its context-aware methods are named after the
// QMP verbs they send (QueryStatus sends query-status) and include the
// job-based snapshot commands of QEMU ≥ 6.0 (snapshot-save, snapshot-load,
// snapshot-delete), which report success or failure only through the job
// (see [Monitor.RunJob]).
//
// References: the QMP specification (QEMU docs/interop/qmp-spec) and the
// QMP reference manual (https://qemu-project.gitlab.io/qemu/interop/qemu-qmp-ref.html).
package qmp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	goqmp "github.com/digitalocean/go-qemu/qmp"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Transport carries QMP commands and events of named domains. vmctl/libvirt's
// Conn implements it; tests use a fake.
type Transport interface {
	// MonitorCommand sends one QMP command, a JSON object such as
	// {"execute":"query-status"} or {"execute":"x","arguments":{...}}, to
	// the QEMU of domain and returns the "return" member of the reply. An
	// error reply of QEMU is returned as a [ReplyError].
	MonitorCommand(ctx context.Context, domain string, cmd []byte) (json.RawMessage, error)
	// MonitorEvents delivers the QMP events of domain, in order, until ctx
	// ends; then (or when the domain goes away) the channel is closed. An
	// Event with Gap set is delivered when events may have been lost
	// (the transport reconnected); the reader must re-read the state it
	// waits for.
	MonitorEvents(ctx context.Context, domain string) (<-chan Event, error)
}

// ReplyError is implemented by a Transport's errors that are QEMU's own
// error reply ({"error":{"class":...,"desc":...}}), as opposed to a
// failure to deliver the command (vmctl/libvirt's *QMPError implements
// it). Find it with errors.As.
type ReplyError interface {
	error
	// QMPErrorClass is QEMU's error class, e.g. "GenericError".
	QMPErrorClass() string
}

// Event is one QMP event, e.g. {"event":"JOB_STATUS_CHANGE",
// "data":{"id":"j1","status":"concluded"},"timestamp":{...}}.
type Event struct {
	// Name is the QMP event name, e.g. "JOB_STATUS_CHANGE", "STOP",
	// "RESUME"; empty on a Gap marker.
	Name string
	// Data is the event's "data" member (JSON; may be nil).
	Data json.RawMessage
	// Time is QEMU's timestamp of the event (zero on a Gap marker).
	Time time.Time
	// Gap marks a point where events may have been lost: the transport's
	// connection dropped and was re-established. State must be polled.
	Gap bool
}

// ErrDisconnected is wrapped by calls on a Monitor after Disconnect. It
// is of errdefs.ErrInternal (a snapshot call that meets it is answered
// 500 internal, as it always was); errdefs is the one package of agentbox
// qmp imports (standard library only, no cycle).
var ErrDisconnected = errdefs.New(errdefs.ErrInternal, "", "qmp: monitor disconnected")

// Options tunes a [Monitor]. The zero value is usable.
type Options struct {
	// Timeout bounds each command sent through the context-free
	// go-qemu interface ([Monitor.Run]); default 30 s. The context-aware
	// methods use their ctx instead.
	Timeout time.Duration
	// PollInterval is how often [Monitor.RunJob] polls query-jobs in
	// addition to waiting for JOB_STATUS_CHANGE events (a fallback for
	// events lost across a reconnection); default 1 s.
	PollInterval time.Duration
	// Gone reports whether a transport error means the domain no longer
	// exists (vmctl/libvirt: ErrDomainNotFound). [Monitor.RunJob] then
	// stops waiting at once; other query-jobs failures are retried (the
	// transport may be reconnecting). Default: never.
	Gone func(error) bool
	// Logger receives debug records (jobs, lost events) with the key
	// "domain"; default discard.
	Logger *slog.Logger
}

// Monitor is the QMP monitor of one domain over a [Transport]. It is safe
// for concurrent use. It implements go-qemu's qmp.Monitor (Connect,
// Disconnect, Run, Events).
type Monitor struct {
	t      Transport
	domain string
	opts   Options
	log    *slog.Logger

	ctx    context.Context // ended by Disconnect
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
}

var _ goqmp.Monitor = (*Monitor)(nil)

// New returns the monitor of the domain called domain on t. It sends
// nothing until used.
func New(t Transport, domain string, opts Options) *Monitor {
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Monitor{t: t, domain: domain, opts: opts, log: log.With(slog.String("domain", domain)), ctx: ctx, cancel: cancel}
}

// Domain returns the name of the monitor's domain.
func (m *Monitor) Domain() string { return m.domain }

// Connect implements go-qemu's qmp.Monitor: it checks that the domain's
// QEMU answers (query-version). The transport's connection is shared and
// already open, so there is no handshake to do.
func (m *Monitor) Connect() error {
	if err := m.alive(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.opts.Timeout)
	defer cancel()
	_, err := m.t.MonitorCommand(ctx, m.domain, []byte(`{"execute":"query-version"}`))
	return err
}

// Disconnect implements go-qemu's qmp.Monitor: it ends every event stream
// of this Monitor; later calls fail with [ErrDisconnected]. The shared
// transport stays open. Disconnect is idempotent.
func (m *Monitor) Disconnect() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.cancel()
	return nil
}

func (m *Monitor) alive() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("qmp on %s: %w", m.domain, ErrDisconnected)
	}
	return nil
}

// Run implements go-qemu's qmp.Monitor: it sends command (a JSON QMP
// command) and returns the reply as QEMU's monitor would write it,
// {"return":...}, which is what go-qemu's raw.Monitor decodes. An error
// reply is returned as an error. Each call is bounded by Options.Timeout.
func (m *Monitor) Run(command []byte) ([]byte, error) {
	if err := m.alive(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.opts.Timeout)
	defer cancel()
	ret, err := m.t.MonitorCommand(ctx, m.domain, command)
	if err != nil {
		return nil, err
	}
	if len(ret) == 0 {
		ret = json.RawMessage("{}")
	}
	return json.Marshal(struct {
		Return json.RawMessage `json:"return"`
	}{ret})
}

// Events implements go-qemu's qmp.Monitor: QMP events of the domain until
// ctx ends or Disconnect is called, then the channel is closed. As go-qemu
// documents for its monitors, a broken stream closes the channel: when the
// transport reports a gap (events lost across a reconnection) the channel
// is closed, and the caller subscribes again and re-reads state.
func (m *Monitor) Events(ctx context.Context) (<-chan goqmp.Event, error) {
	if err := m.alive(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(m.ctx, cancel)
	in, err := m.t.MonitorEvents(ctx, m.domain)
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	out := make(chan goqmp.Event)
	go func() {
		defer close(out)
		defer stop()
		defer func() {
			cancel()
			for range in { // the transport closes in once ctx ends
			}
		}()
		for ev := range in {
			if ev.Gap {
				m.log.Debug("qmp events lost across a reconnection; closing the go-qemu event stream")
				return
			}
			ge := goqmp.Event{Event: ev.Name}
			if len(ev.Data) > 0 {
				if err := json.Unmarshal(ev.Data, &ge.Data); err != nil {
					m.log.Debug("undecodable qmp event data", slog.String("event", ev.Name), slog.Any("err", err))
					return
				}
			}
			if !ev.Time.IsZero() {
				ge.Timestamp.Seconds = ev.Time.Unix()
				ge.Timestamp.Microseconds = int64(ev.Time.Nanosecond() / 1000)
			}
			select {
			case out <- ge:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Execute sends the QMP command verb with args (marshalled to the
// "arguments" member; nil for none) and decodes the "return" member into
// ret (nil to ignore it). Errors name the verb and the domain and keep the
// transport's error in the chain.
func (m *Monitor) Execute(ctx context.Context, verb string, args, ret any) error {
	if err := m.alive(); err != nil {
		return err
	}
	cmd, err := json.Marshal(goqmp.Command{Execute: verb, Args: args})
	if err != nil {
		return fmt.Errorf("qmp %s on %s: encode arguments: %w", verb, m.domain, err)
	}
	raw, err := m.t.MonitorCommand(ctx, m.domain, cmd)
	if err != nil {
		return fmt.Errorf("qmp %s on %s: %w", verb, m.domain, err)
	}
	if ret == nil {
		return nil
	}
	if err := json.Unmarshal(raw, ret); err != nil {
		return fmt.Errorf("qmp %s on %s: decode reply %.200s: %w", verb, m.domain, raw, err)
	}
	return nil
}
