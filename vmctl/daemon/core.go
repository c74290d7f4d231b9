package daemon

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/process"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
	"github.com/agentbox/agentbox/vmctl/sandbox/warm"
	"github.com/agentbox/agentbox/vmctl/store"
)

// core is what every service of the daemon shares: the sandbox manager
// and its registry of boxes, the store, the audit log (its one entry
// builder: audit.go), admission, the policy asks (policy.go), tenancy
// (tenants.go), events and metrics. The services (execService,
// filesService, lifecycleService, portsService, snapshotService) embed
// it; what one service needs of another it reaches through the core's
// seams, small interfaces set by assemble (processes, forwards), never
// through the Daemon.
type core struct {
	cfg     Config
	log     *slog.Logger
	mgr     *sandbox.Manager
	limits  *resources.Enforcer // Config.Limits of mgr; samples usage
	snaps   *snapshot.Service
	warm    *warm.Service
	store   *store.Store
	audit   *audit.Log
	metrics *metrics
	events  *hub
	report  sandbox.Report
	adm     *admission    // capacity, ceilings, shutdown refusal (admission.go)
	usage   *usageMonitor // usage samples and thresholds (usage.go)

	mu       sync.Mutex
	boxes    map[string]*box   // by sandbox ID
	seen     map[string]string // sandbox ID → last state published as an event
	inflight sync.WaitGroup    // execs and file transfers

	stopReaper context.CancelFunc
	reaperDone chan struct{}

	snapMetricsOnce sync.Once // snapshots.go
	snapM           *snapshotMetrics

	secretViews sync.Map    // sandbox ID → []api.SecretInfo (secrets.go)
	qemuPIDs    sync.Map    // sandbox ID → its QEMU's pid, until its record changes (qemuuser.go)
	tenants     *tenancy    // owners and quota holds (tenants.go)
	cl          clusterSeam // the cluster this daemon is a node of (cluster.go)

	processes processKeeper // the exec service's detached processes (procs.go)
	forwards  portKeeper    // the ports service (ports.go)
}

// processKeeper is the exec service as the core and the other services
// see it: the detached processes of a sandbox across its end, its pauses
// and its restores (procs.go, exec.go).
type processKeeper interface {
	// processExited is a box's process table's OnExit (exec.go).
	processExited(b *box, info process.Info)
	// endUnadopted ends the history of the detached processes of a
	// sandbox that ended while a previous daemon ran them.
	endUnadopted(id, reason string)
	// saveProcesses, suspendProcesses and resumeProcesses keep b's
	// processes across a pause (lifecycle.go).
	saveProcesses(ctx context.Context, b *box)
	suspendProcesses(b *box)
	resumeProcesses(ctx context.Context, b *box)
	// dropInheritedProcesses forgets the processes a restored sandbox's
	// snapshot carried (snapshots.go).
	dropInheritedProcesses(ctx context.Context, sb *sandbox.Sandbox)
}

// portKeeper is the ports service as the core and the lifecycle see it.
type portKeeper interface {
	// portViews renders sandbox id's forwards for the API (core.view).
	portViews(id string) []api.PortForward
	// closePorts closes sandbox id's forwards (stop, removal, end).
	closePorts(id, reason string, removed bool)
	// openRecordedPorts opens again the forwards b's record keeps (a
	// start).
	openRecordedPorts(b *box)
}

// box is the daemon's side of one sandbox: its detached processes. The
// sandbox keeps its exec accounting (sandbox.ExecAccount: limits, counts,
// activity, what its expiry reads) in its record; the exec service
// counts each command in it (execCount, under sandbox.BeginExec); the
// process table is the daemon's view of the processes the guest agent
// keeps, like the audit and the metrics its OnExit feeds: a restarted
// daemon adopts them (adoptProcesses).
type box struct {
	sb    *sandbox.Sandbox
	procs *process.Table
	// life ends when the sandbox is stopped or removed; detached
	// processes run under it.
	life   context.Context
	cancel context.CancelFunc
}

// addBox creates the daemon's state for sb.
func (c *core) addBox(sb *sandbox.Sandbox) *box {
	sb.ExecAccount() // read from the record now: an unreadable one is logged at start-up
	b := &box{sb: sb}
	b.life, b.cancel = context.WithCancel(context.Background())
	b.procs = process.NewTable(sb, process.Options{OnExit: func(info process.Info) { c.processes.processExited(b, info) }})
	c.mu.Lock()
	c.boxes[sb.ID] = b
	c.mu.Unlock()
	return b
}

func (c *core) allBoxes() []*box {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*box, 0, len(c.boxes))
	for _, b := range c.boxes {
		out = append(out, b)
	}
	return out
}

// onChange is the manager's observer: events, metrics, and the end of a
// sandbox's detached processes once its domain is gone.
func (c *core) onChange(r sandbox.Record, removed bool) {
	now := time.Now().UTC()
	c.tenants.seen(r)
	c.qemuPIDs.Delete(r.ID) // a start, stop or pause may have changed the process
	if removed {
		c.tenants.removed(r.ID)    // its quota back
		c.secretViews.Delete(r.ID) // secrets.go: the cache holds live sandboxes only
	}
	c.mu.Lock()
	last, known := c.seen[r.ID]
	switch {
	case removed:
		delete(c.seen, r.ID)
	default:
		c.seen[r.ID] = string(r.State)
	}
	b := c.boxes[r.ID]
	if removed {
		delete(c.boxes, r.ID)
	}
	c.mu.Unlock()
	// One event per change: a record write that only updated counters
	// (SaveExecAccount) publishes nothing; the first sight of a sandbox is its
	// "created".
	switch {
	case removed:
		c.events.publish(api.Event{Time: now, Type: api.EventSandboxRemoved, Sandbox: r.ID, Name: r.Name, Tenant: r.Tenant})
	case !known:
		c.events.publish(api.Event{Time: now, Type: api.EventSandboxCreated, Sandbox: r.ID, Name: r.Name, State: string(r.State), Reason: r.Reason})
	case last != string(r.State):
		c.events.publish(api.Event{Time: now, Type: api.EventSandboxState, Sandbox: r.ID, Name: r.Name, State: string(r.State), Reason: r.Reason})
	}
	if r.State.Final() || removed {
		if b != nil {
			// CloseAll takes the table's lock only; it must not wait here
			// for OnExit callbacks that take c.mu (they do not).
			go func() {
				b.procs.CloseAll("sandbox " + string(r.State))
				if !removed {
					c.processes.endUnadopted(r.ID, "sandbox "+string(r.State)) // procs.go
				}
				b.cancel()
				c.forwards.closePorts(r.ID, portsEnd(r, removed), removed) // ports.go
			}()
		}
	}
}
