package libvirt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/agentbox/agentbox/vmctl/domain"
)

// State is a domain state, libvirt's virDomainState. The string values
// are stable API.
type State string

// Domain states (libvirt VIR_DOMAIN_*).
const (
	StateNoState     State = "nostate"
	StateRunning     State = "running"
	StateBlocked     State = "blocked"
	StatePaused      State = "paused"
	StateShutdown    State = "shutdown" // being shut down
	StateShutoff     State = "shutoff"
	StateCrashed     State = "crashed"
	StatePMSuspended State = "pmsuspended"
)

var states = []State{
	StateNoState, StateRunning, StateBlocked, StatePaused,
	StateShutdown, StateShutoff, StateCrashed, StatePMSuspended,
}

// Active reports whether a QEMU process backs the domain in this state
// (everything but shutoff, crashed and nostate).
func (s State) Active() bool {
	switch s {
	case StateShutoff, StateNoState, StateCrashed:
		return false
	}
	return true
}

func stateOf(s int32) State {
	if s >= 0 && int(s) < len(states) {
		return states[s]
	}
	return State("state-" + strconv.Itoa(int(s)))
}

// DomainInfo describes a domain known to libvirt.
type DomainInfo struct {
	// Name is the domain name.
	Name string
	// UUID is the domain UUID in textual 8-4-4-4-12 form.
	UUID string
	// State is the state when the information was read.
	State State
	// SandboxID and Image come from agentbox's <metadata> element
	// (see domain.MetadataNamespace); both are empty for domains agentbox
	// did not create.
	SandboxID string
	Image     string
	// Owner is the managing daemon's instance id from the metadata
	// (domain.Metadata.Owner), empty for in-process sandboxes.
	Owner string
}

// CreateOptions tunes [Conn.CreateDomain].
type CreateOptions struct {
	// Paused starts the domain with its vCPUs stopped
	// (VIR_DOMAIN_START_PAUSED); resume it with QMP "cont".
	Paused bool
	// AutoDestroy ties the domain to this connection
	// (VIR_DOMAIN_START_AUTODESTROY): libvirtd destroys it when the
	// connection closes for any reason — Close, the process exiting or
	// being killed (kill -9), libvirtd losing the client. For domains
	// that must die with the process that made them (`agentbox run`
	// in-process); never for a daemon's, which outlive its restarts.
	AutoDestroy bool
}

// CreateDomain creates and starts a transient domain from its XML
// (virDomainCreateXML): libvirt keeps no config and the domain disappears
// once it stops. It returns the new domain's info (state running, or
// paused with opts.Paused). Errors wrap [ErrExists] when the name or UUID is
// taken, and [ErrUnavailable] when libvirtd is unreachable. After a
// connection loss mid-call, or when ctx ends before libvirt answers, the
// domain may or may not exist: revert with DestroyDomain(name) under a
// context not bound to the failed request.
func (c *Conn) CreateDomain(ctx context.Context, xml string, opts CreateOptions) (DomainInfo, error) {
	flags := golibvirt.DomainNone
	if opts.Paused {
		flags |= golibvirt.DomainStartPaused
	}
	if opts.AutoDestroy {
		flags |= golibvirt.DomainStartAutodestroy
	}
	var info DomainInfo
	err := c.do(ctx, false, func(lv *golibvirt.Libvirt) error {
		d, err := lv.DomainCreateXML(xml, flags)
		if err != nil {
			return err
		}
		info, err = describe(lv, d)
		return err
	})
	if err != nil {
		return DomainInfo{}, mapErr("create domain", err)
	}
	c.log.Debug("domain created", "domain", info.Name)
	return info, nil
}

// DestroyDomain stops a domain at once (virDomainDestroy: SIGTERM, then
// SIGKILL after a grace period), which for a transient domain also removes
// it. A domain that does not exist or is not running is not an error.
func (c *Conn) DestroyDomain(ctx context.Context, name string) error {
	err := c.do(ctx, true, func(lv *golibvirt.Libvirt) error {
		d, err := lv.DomainLookupByName(name)
		if err != nil {
			return err
		}
		return lv.DomainDestroyFlags(d, golibvirt.DomainDestroyDefault)
	})
	err = mapErr("destroy domain "+name, err)
	if errors.Is(err, ErrDomainNotFound) || errors.Is(err, ErrNotRunning) {
		return nil
	}
	if err == nil {
		c.log.Debug("domain destroyed", "domain", name)
	}
	return err
}

// DomainState returns the current state of the domain called name
// (virDomainGetState). Errors wrap [ErrDomainNotFound] when there is no
// such domain.
func (c *Conn) DomainState(ctx context.Context, name string) (State, error) {
	var st State
	err := c.do(ctx, true, func(lv *golibvirt.Libvirt) error {
		d, err := lv.DomainLookupByName(name)
		if err != nil {
			return err
		}
		s, _, err := lv.DomainGetState(d, 0)
		st = stateOf(s)
		return err
	})
	if err != nil {
		return "", mapErr("state of domain "+name, err)
	}
	return st, nil
}

// ListDomains returns every domain of the connection, running or not
// (virConnectListAllDomains), with agentbox's metadata where present.
// Domains that vanish while the list is read are left out.
func (c *Conn) ListDomains(ctx context.Context) ([]DomainInfo, error) {
	var out []DomainInfo
	err := c.do(ctx, true, func(lv *golibvirt.Libvirt) error {
		out = nil
		doms, _, err := lv.ConnectListAllDomains(1, golibvirt.ConnectListDomainsActive|golibvirt.ConnectListDomainsInactive)
		if err != nil {
			return err
		}
		for _, d := range doms {
			info, err := describe(lv, d)
			if golibvirt.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			out = append(out, info)
		}
		return nil
	})
	if err != nil {
		return nil, mapErr("list domains", err)
	}
	return out, nil
}

// describe reads state and agentbox metadata of d.
func describe(lv *golibvirt.Libvirt, d golibvirt.Domain) (DomainInfo, error) {
	info := DomainInfo{Name: d.Name, UUID: formatUUID(d.UUID)}
	s, _, err := lv.DomainGetState(d, 0)
	if err != nil {
		return info, err
	}
	info.State = stateOf(s)
	raw, err := lv.DomainGetMetadata(d, int32(golibvirt.DomainMetadataElement),
		golibvirt.OptString{domain.MetadataNamespace}, golibvirt.DomainAffectCurrent)
	var lerr golibvirt.Error
	switch {
	case errors.As(err, &lerr) && golibvirt.ErrorNumber(lerr.Code) == golibvirt.ErrNoDomainMetadata:
		return info, nil
	case err != nil:
		return info, err
	}
	if md, err := domain.ParseMetadata(raw); err == nil {
		info.SandboxID, info.Image, info.Owner = md.SandboxID, md.Image, md.Owner
	}
	return info, nil
}

var pidNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// DomainPID returns the process id of the QEMU process running the domain,
// read from the pid file libvirt's QEMU driver keeps in its state directory
// (/run/libvirt/qemu/NAME.pid for qemu:///system,
// $XDG_RUNTIME_DIR/libvirt/qemu/run/NAME.pid for qemu:///session). It
// only works when libvirtd runs on this host. Errors wrap
// [ErrDomainNotFound] or [ErrNotRunning].
func (c *Conn) DomainPID(ctx context.Context, name string) (int, error) {
	if !pidNameRE.MatchString(name) {
		return 0, fmt.Errorf("pid of domain %q: invalid domain name", name)
	}
	st, err := c.DomainState(ctx, name)
	if err != nil {
		return 0, err
	}
	if !st.Active() {
		return 0, fmt.Errorf("pid of domain %s: %w (state %s)", name, ErrNotRunning, st)
	}
	b, err := os.ReadFile(filepath.Join(c.ep.runDir, name+".pid"))
	if err != nil {
		return 0, fmt.Errorf("pid of domain %s: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid of domain %s: malformed pid file %q", name, b)
	}
	return pid, nil
}

// formatUUID renders a 16-byte UUID in its 8-4-4-4-12 hex form.
func formatUUID(u golibvirt.UUID) string {
	b := u[:]
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
