package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/portfwd"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

var _ backend.PortBackend = (*Daemon)(nil)

// portsService is the daemon's port forwards (the API's ports and their
// life with the sandbox's: reopened at start-up and on a start, closed
// on a stop or removal). The core sees it as its portKeeper.
type portsService struct {
	*core
	ports portTable
}

// portTable is the daemon's port forwards: by sandbox ID, then guest port
// (one forward per guest port). Each sandbox's record keeps its forwards
// (sandbox.Record.Ports), so a restarted daemon opens them again
// (reopenPorts). They stay open while the sandbox is paused, in memory or
// to disk (a connection meanwhile is reset at once: the guest cannot
// answer); a sandbox that stops keeps them in its record, listed closed,
// and its start opens them again (openRecordedPorts); a removed one loses
// them (closePorts).
type portTable struct {
	mu sync.Mutex
	m  map[string]map[int]*portEntry
}

// portEntry is one forward: its record and its listener (nil when a
// restarted daemon could not listen again; err says why).
type portEntry struct {
	rec sandbox.PortForward
	fwd *portfwd.Forward
	err string
}

// recordsLocked returns the records of sandbox id's forwards by guest
// port; t.mu held.
func (t *portTable) recordsLocked(id string) []sandbox.PortForward {
	var out []sandbox.PortForward
	for _, e := range t.m[id] {
		out = append(out, e.rec)
	}
	slices.SortFunc(out, func(a, b sandbox.PortForward) int { return a.GuestPort - b.GuestPort })
	return out
}

// EgressPorts are the TCP ports the egress service of every networked
// sandbox listens on at the host side of its tap (DNS, and the name
// rules' 80 and 443): a port forward bound to a wildcard or non-loopback
// address there would make every later networked create fail with
// EADDRINUSE, so checkForward refuses them off loopback.
var EgressPorts = []int{53, 80, 443}

// MinTenantHostPort is the lowest host port a tenant's port forward may
// bind (0, a free port, is allowed too): lower ones are the host's
// services'.
const MinTenantHostPort = 1024

// errReservedPort: a port forward asked for a port the daemon or its
// egress service uses (409 conflict).
var errReservedPort = errdefs.New(errdefs.ErrConflict, "", "host port reserved by the daemon")

// checkForward checks a port forward's host address before anything
// listens: for anyone, not one of Config.ReservedPorts, and off loopback
// not one of EgressPorts (409); for a tenant t, only a loopback address
// and a port of at least MinTenantHostPort or 0, never one some tenant's
// host_ports grant (403 tenant.ErrNotGranted).
// A malformed address is left to portfwd.Listen (400).
func (s *portsService) checkForward(t *tenant.Tenant, hostAddr string) error {
	ap, err := netip.ParseAddrPort(hostAddr)
	if err != nil {
		return nil
	}
	port := int(ap.Port())
	if t != nil && (!ap.Addr().Unmap().IsLoopback() || port != 0 && port < MinTenantHostPort) {
		return errdefs.WithDetails(tenant.ErrNotGranted.WithMessage(fmt.Sprintf(
			"host address %s: tenants may forward only to loopback ports >= %d (127.0.0.1:PORT, [::1]:PORT, or port 0 for a free one); ask the operator for host ports",
			ap, MinTenantHostPort)), map[string]any{"tenant": t.Name, "host_addr": ap.String(), "min_port": MinTenantHostPort})
	}
	if t != nil && grantedHostPort(s.cfg.Tenants, port) {
		// Another tenant's sandboxes reach 127.0.0.1:port through host:PORT:
		// a forward there would splice them to this tenant's guest.
		return errdefs.WithDetails(tenant.ErrNotGranted.WithMessage(fmt.Sprintf(
			"host address %s: port %d is a host port the operator grants to tenants' sandboxes (host_ports): tenants may not forward it; choose another port, or leave the port out for a free one",
			ap, port)), map[string]any{"tenant": t.Name, "host_addr": ap.String()})
	}
	if slices.Contains(s.cfg.ReservedPorts, port) {
		return errdefs.WithDetails(errReservedPort.WithMessage(fmt.Sprintf(
			"host address %s: port %d is one of the daemon's own listeners (%v): choose another port, or leave the port out for a free one",
			ap, port, s.cfg.ReservedPorts)), map[string]any{"host_addr": ap.String(), "reserved_ports": s.cfg.ReservedPorts})
	}
	if slices.Contains(EgressPorts, port) && !ap.Addr().Unmap().IsLoopback() {
		return errdefs.WithDetails(errReservedPort.WithMessage(fmt.Sprintf(
			"host address %s: port %d off loopback is the sandboxes' egress port (%v on every tap): bind it on 127.0.0.1, or choose another port",
			ap, port, EgressPorts)), map[string]any{"host_addr": ap.String(), "reserved_ports": EgressPorts})
	}
	return nil
}

// grantedHostPort reports whether some tenant of reg may expose the
// host's loopback port to its sandboxes (host_ports).
func grantedHostPort(reg *tenant.Registry, port int) bool {
	for _, t := range reg.Tenants() {
		if t.AllowsHostPort(port) {
			return true
		}
	}
	return false
}

// forwardLimit is the most forwards one sandbox of tenant t may have (0
// for the admin: no limit).
func forwardLimit(t *tenant.Tenant) int {
	if t == nil {
		return 0
	}
	return t.Quota.PortForwards()
}

// ForwardPort implements backend.PortBackend: it opens a host listener
// whose connections go to the running sandbox's guest port through the
// guest agent, keeps it in the sandbox's record and audits it. A
// tenant's forward binds only loopback ports >= MinTenantHostPort (403),
// at most its max_port_forwards per sandbox (429 tenant_quota); nobody's
// binds the daemon's ports (409; checkForward). Every refusal comes
// before anything listens.
func (s *portsService) ForwardPort(ctx context.Context, ref string, req api.PortForwardRequest) (api.PortForward, error) {
	start := time.Now()
	b, err := s.running(ctx, ref)
	if err != nil {
		return api.PortForward{}, err
	}
	if ctx, err = s.policyPort(ctx, b, &req); err != nil { // policy.go
		return api.PortForward{}, err
	}
	hostAddr := req.HostAddr
	if hostAddr == "" {
		hostAddr = api.DefaultPortHostAddr
	}
	args := map[string]any{"guest_port": req.GuestPort, "host_addr": hostAddr}
	caller, _ := tenant.From(ctx)
	if err := s.checkForward(caller, hostAddr); err != nil {
		s.auditAction(ctx, b.sb.ID, audit.ActionPortOpen, args, start, err)
		return api.PortForward{}, err
	}
	e, err := s.openPort(b, sandbox.PortForward{GuestPort: req.GuestPort, HostAddr: hostAddr, CreatedAt: start.UTC()}, caller)
	if err == nil {
		args["host_addr"] = e.rec.HostAddr
	}
	s.auditAction(ctx, b.sb.ID, audit.ActionPortOpen, args, start, err)
	if err != nil {
		return api.PortForward{}, err
	}
	s.log.Info("port forward opened", "sandbox", b.sb.ID, "guest_port", req.GuestPort, "host_addr", e.rec.HostAddr)
	return portView(e), nil
}

// openPort listens for rec and adds the forward to b's table and record.
// Errors: conflict when the guest port is forwarded already;
// tenant.ErrQuotaExceeded when caller (nil: the admin) has its
// max_port_forwards of them on b already; Listen's.
func (s *portsService) openPort(b *box, rec sandbox.PortForward, caller *tenant.Tenant) (*portEntry, error) {
	id := b.sb.ID
	s.ports.mu.Lock()
	defer s.ports.mu.Unlock()
	if e := s.ports.m[id][rec.GuestPort]; e != nil {
		return nil, errdefs.ErrConflict.WithMessage(fmt.Sprintf("guest port %d of sandbox %s is forwarded already, at %s: remove that forward first (agentbox port rm %s %d)",
			rec.GuestPort, id, e.rec.HostAddr, id, rec.GuestPort))
	}
	if limit := forwardLimit(caller); limit > 0 && len(s.ports.m[id]) >= limit {
		return nil, errdefs.WithDetails(tenant.ErrQuotaExceeded.WithMessage(fmt.Sprintf(
			"tenant %s: sandbox %s has %d of %d port forwards; remove one (agentbox port rm %s PORT) or raise max_port_forwards",
			caller.Name, id, len(s.ports.m[id]), limit, id)), map[string]any{
			"tenant": caller.Name, "resource": "port_forwards", "used": len(s.ports.m[id]), "limit": limit, "asked": 1})
	}
	e, err := s.listenPort(b, rec)
	if err != nil {
		return nil, err
	}
	if b.life.Err() != nil { // the sandbox stopped meanwhile: closePorts has run
		e.fwd.Close()
		return nil, b.sb.NotRunning()
	}
	s.addPortLocked(id, e)
	return e, nil
}

// listenPort opens rec's listener for b's sandbox; rec.HostAddr becomes
// the address bound.
func (s *portsService) listenPort(b *box, rec sandbox.PortForward) (*portEntry, error) {
	sb := b.sb
	f, err := portfwd.Listen(portfwd.Options{
		GuestPort: rec.GuestPort,
		HostAddr:  rec.HostAddr,
		Dial: func(ctx context.Context, port int) (portfwd.Conn, error) {
			c, err := sb.Connect(ctx, port)
			var pe *agentproto.Error
			switch {
			case errors.As(err, &pe):
				// The guest's own words ("connect to guest port 8000:
				// connection refused: …") are the connection's error.
				return nil, errors.New(pe.Message)
			case err != nil:
				return nil, err
			}
			return c, nil
		},
		// A forwarded connection moving bytes is the sandbox's activity.
		OnData: func(int) { sb.Touch() },
		OnEnd: func(r portfwd.ConnResult) {
			if r.Err != nil {
				s.log.Info("forwarded connection failed", "sandbox", sb.ID, "guest_port", rec.GuestPort, "client", r.Client, "err", r.Err)
			}
			s.metrics.bytes.WithLabelValues("in", "port").Add(float64(r.In))
			s.metrics.bytes.WithLabelValues("out", "port").Add(float64(r.Out))
		},
	})
	if err != nil {
		return nil, err
	}
	rec.HostAddr = f.Addr()
	return &portEntry{rec: rec, fwd: f}, nil
}

// addPortLocked adds e to the table and persists the sandbox's forwards;
// s.ports.mu held.
func (s *portsService) addPortLocked(id string, e *portEntry) {
	if s.ports.m == nil {
		s.ports.m = map[string]map[int]*portEntry{}
	}
	if s.ports.m[id] == nil {
		s.ports.m[id] = map[int]*portEntry{}
	}
	s.ports.m[id][e.rec.GuestPort] = e
	if b := s.box(id); b != nil {
		b.sb.SetPorts(s.ports.recordsLocked(id))
	}
}

// ListPorts implements backend.PortBackend.
func (s *portsService) ListPorts(ctx context.Context, ref string) ([]api.PortForward, error) {
	sb, err := s.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	return s.portViews(sb.ID), nil
}

// portViews renders sandbox id's forwards by guest port.
func (s *portsService) portViews(id string) []api.PortForward {
	s.ports.mu.Lock()
	entries := make([]*portEntry, 0, len(s.ports.m[id]))
	for _, e := range s.ports.m[id] {
		entries = append(entries, e)
	}
	s.ports.mu.Unlock()
	slices.SortFunc(entries, func(a, b *portEntry) int { return a.rec.GuestPort - b.rec.GuestPort })
	out := make([]api.PortForward, 0, len(entries))
	for _, e := range entries {
		out = append(out, portView(e))
	}
	return out
}

func portView(e *portEntry) api.PortForward {
	v := api.PortForward{GuestPort: e.rec.GuestPort, HostAddr: e.rec.HostAddr, CreatedAt: e.rec.CreatedAt, Error: e.err}
	if e.fwd != nil {
		s := e.fwd.Stats()
		v.Open = true
		v.Connections, v.Active, v.Failed = s.Connections, s.Active, s.Failed
		v.BytesIn, v.BytesOut, v.LastError = s.BytesIn, s.BytesOut, s.LastError
	}
	return v
}

// RemovePort implements backend.PortBackend: it closes the forward of
// guestPort (resetting its connections) and audits it with its counts.
func (s *portsService) RemovePort(ctx context.Context, ref string, guestPort int) error {
	start := time.Now()
	sb, err := s.get(ctx, ref)
	if err != nil {
		return err
	}
	s.ports.mu.Lock()
	e := s.ports.m[sb.ID][guestPort]
	if e == nil {
		s.ports.mu.Unlock()
		return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("sandbox %s has no forward of guest port %d: `agentbox port ls %s` lists them", sb.ID, guestPort, sb.ID))
	}
	delete(s.ports.m[sb.ID], guestPort)
	sb.SetPorts(s.ports.recordsLocked(sb.ID))
	s.ports.mu.Unlock()
	s.closePort(sb.ID, e, api.CallerFrom(ctx).ID, "removed", start)
	return nil
}

// closePort closes e's listener and its connections and audits it by
// caller with the reason and its counters.
func (s *portsService) closePort(id string, e *portEntry, caller, reason string, start time.Time) {
	args := map[string]any{"guest_port": e.rec.GuestPort, "host_addr": e.rec.HostAddr, "reason": reason}
	entry := auditEntry(start, id, caller, audit.ActionPortClose, args)
	if e.fwd != nil {
		e.fwd.Close()
		st := e.fwd.Stats()
		args["connections"], args["failed"] = st.Connections, st.Failed
		entry.BytesIn, entry.BytesOut = st.BytesIn, st.BytesOut
	}
	entry.DurationMs = ms(time.Since(start))
	s.appendAudit(entry)
	s.log.Info("port forward closed", "sandbox", id, "guest_port", e.rec.GuestPort, "host_addr", e.rec.HostAddr, "reason", reason)
}

// closePorts closes every forward of sandbox id, which stopped or was
// removed (reason). A removed sandbox loses them. A stopped (or failed)
// one keeps them in its record, listed closed with the reason, for its
// start (openRecordedPorts); nothing is closed when it runs again by
// now (the stop's own call closed them, and this is onChange's late one).
func (s *portsService) closePorts(id, reason string, removed bool) {
	s.ports.mu.Lock()
	entries := s.ports.m[id]
	if removed {
		delete(s.ports.m, id)
	} else {
		if b := s.box(id); b != nil && !b.sb.State().Final() {
			s.ports.mu.Unlock()
			return
		}
		kept := make(map[int]*portEntry, len(entries))
		for port, e := range entries {
			kept[port] = &portEntry{rec: e.rec, err: reason + ": `agentbox start` opens it again"}
		}
		if len(kept) > 0 {
			s.ports.m[id] = kept
		}
	}
	s.ports.mu.Unlock()
	if len(entries) == 0 {
		return
	}
	if b := s.box(id); b != nil && removed {
		b.sb.SetPorts(nil) // persists nothing once the sandbox was removed
	}
	for _, e := range entries {
		if e.fwd != nil {
			s.closePort(id, e, "daemon", reason, time.Now())
		}
	}
}

// portsEnd is the reason closePorts records for a sandbox that stopped
// or was removed.
func portsEnd(r sandbox.Record, removed bool) string {
	if removed {
		return "sandbox removed"
	}
	return "sandbox " + string(r.State)
}

// reopenPorts opens again, at the same host addresses, the forwards that
// the records of running and paused sandboxes keep (after a daemon
// restart), and lists those of stopped ones closed (their start opens
// them).
func (s *portsService) reopenPorts() {
	for _, b := range s.allBoxes() {
		if r := b.sb.Record(); r.State.Final() {
			s.ports.mu.Lock()
			for _, rec := range r.Ports {
				s.addPortLocked(b.sb.ID, &portEntry{rec: rec, err: "sandbox " + string(r.State) + ": `agentbox start` opens it again"})
			}
			s.ports.mu.Unlock()
			continue
		}
		s.openRecordedPorts(b)
	}
}

// openRecordedPorts opens the forwards b's record keeps at the same host
// addresses (a daemon restart, a start of a stopped sandbox), audited as
// port.open with reopen. A forward whose address is taken now stays
// listed, closed, with the reason: the user removes it and forwards
// again.
func (s *portsService) openRecordedPorts(b *box) {
	owner := s.tenants.named(b.sb.Tenant())
	for _, rec := range b.sb.Ports() {
		start := time.Now()
		err := s.checkForward(owner, rec.HostAddr) // a forward kept from before the rules, or a changed --listen-tcp
		var e *portEntry
		if err == nil {
			e, err = s.listenPort(b, rec)
		}
		args := map[string]any{"guest_port": rec.GuestPort, "host_addr": rec.HostAddr, "reopen": true}
		ae := auditEntry(start, b.sb.ID, "daemon", audit.ActionPortOpen, args)
		if err != nil {
			ae.Error, ae.ErrorMessage = auditError(err)
			s.log.Warn("port forward not re-opened", "sandbox", b.sb.ID, "guest_port", rec.GuestPort, "host_addr", rec.HostAddr, "err", err)
			e = &portEntry{rec: rec, err: err.Error()}
		} else {
			s.log.Info("port forward re-opened", "sandbox", b.sb.ID, "guest_port", rec.GuestPort, "host_addr", rec.HostAddr)
		}
		s.appendAudit(ae)
		s.ports.mu.Lock()
		if e.fwd != nil && b.life.Err() != nil { // stopped or removed meanwhile: closePorts has run
			e.fwd.Close()
			s.ports.mu.Unlock()
			return
		}
		s.addPortLocked(b.sb.ID, e)
		s.ports.mu.Unlock()
	}
}

// shutdownPorts closes every listener when the daemon shuts down; the
// records keep the forwards for the next daemon.
func (s *portsService) shutdownPorts() {
	s.ports.mu.Lock()
	all := s.ports.m
	s.ports.m = nil
	s.ports.mu.Unlock()
	for id, entries := range all {
		for _, e := range entries {
			s.closePort(id, e, "daemon", "daemon shut down", time.Now())
		}
	}
}
