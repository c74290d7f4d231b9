package libvirt

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// Stats is one sample of a domain's live statistics, read with
// virConnectGetAllDomainStats (the fields of `virsh domstats`; see
// https://libvirt.org/manpages/virsh.html#domstats).
type Stats struct {
	// State is the domain state; PauseReason says why a paused domain is
	// paused (libvirt's virDomainPausedReason in lower case: "user",
	// "ioerror", "watchdog", "snapshot", …), empty otherwise.
	State       State
	PauseReason string
	// CPUTimeNs is the CPU time the QEMU process used, all threads,
	// in nanoseconds (cpu.time).
	CPUTimeNs uint64
	// RSSBytes is the resident set size of the QEMU process in bytes
	// (balloon.rss, which libvirt reads from /proc/PID/stat).
	RSSBytes uint64
	// DiskAllocationBytes, DiskPhysicalBytes and DiskCapacityBytes are
	// the first disk's highest written offset in its file, the host bytes
	// the file occupies, and its virtual size (block.0.allocation,
	// .physical, .capacity), in bytes.
	DiskAllocationBytes uint64
	DiskPhysicalBytes   uint64
	DiskCapacityBytes   uint64
	// NetRxBytes and NetTxBytes sum all interfaces' received and sent
	// bytes (net.N.rx.bytes, net.N.tx.bytes); 0 without interfaces.
	NetRxBytes uint64
	NetTxBytes uint64
}

// pausedReasons are libvirt's virDomainPausedReason values by number.
var pausedReasons = []string{"unknown", "user", "migration", "save", "dump", "ioerror", "watchdog",
	"from-snapshot", "shutting-down", "snapshot", "crashed", "starting-up", "postcopy", "postcopy-failed", "api-error"}

// DomainStats samples the statistics of the running domain called name.
// Errors wrap [ErrDomainNotFound] when there is no such domain and
// [ErrUnavailable] when libvirtd cannot be reached.
func (c *Conn) DomainStats(ctx context.Context, name string) (Stats, error) {
	var recs []golibvirt.DomainStatsRecord
	err := c.do(ctx, true, func(lv *golibvirt.Libvirt) error {
		d, err := lv.DomainLookupByName(name)
		if err != nil {
			return err
		}
		kinds := golibvirt.DomainStatsState | golibvirt.DomainStatsCPUTotal | golibvirt.DomainStatsBalloon |
			golibvirt.DomainStatsInterface | golibvirt.DomainStatsBlock
		recs, err = lv.ConnectGetAllDomainStats([]golibvirt.Domain{d}, uint32(kinds), 0)
		return err
	})
	if err != nil {
		return Stats{}, mapErr("stats of domain "+name, err)
	}
	if len(recs) != 1 {
		return Stats{}, fmt.Errorf("stats of domain %s: libvirt returned %d records: %w", name, len(recs), ErrDomainNotFound)
	}
	return parseStats(recs[0].Params), nil
}

// parseStats reads the typed parameters of one stats record.
func parseStats(params []golibvirt.TypedParam) Stats {
	var s Stats
	var state, reason int64 = -1, -1
	for _, p := range params {
		v, ok := paramInt(p.Value)
		if !ok {
			continue
		}
		switch f := p.Field; {
		case f == "state.state":
			state = v
		case f == "state.reason":
			reason = v
		case f == "cpu.time":
			s.CPUTimeNs = uint64(v)
		case f == "balloon.rss":
			s.RSSBytes = uint64(v) * 1024 // KiB
		case f == "block.0.allocation":
			s.DiskAllocationBytes = uint64(v)
		case f == "block.0.physical":
			s.DiskPhysicalBytes = uint64(v)
		case f == "block.0.capacity":
			s.DiskCapacityBytes = uint64(v)
		case strings.HasPrefix(f, "net.") && strings.HasSuffix(f, ".rx.bytes") && isIndexed(f):
			s.NetRxBytes += uint64(v)
		case strings.HasPrefix(f, "net.") && strings.HasSuffix(f, ".tx.bytes") && isIndexed(f):
			s.NetTxBytes += uint64(v)
		}
	}
	if state >= 0 {
		s.State = stateOf(int32(state))
	}
	if s.State == StatePaused && reason >= 0 && int(reason) < len(pausedReasons) {
		s.PauseReason = pausedReasons[reason]
	}
	return s
}

// isIndexed reports whether a net.* field is per interface ("net.0.rx.bytes",
// not "net.count").
func isIndexed(f string) bool {
	parts := strings.Split(f, ".")
	if len(parts) != 4 {
		return false
	}
	_, err := strconv.Atoi(parts[1])
	return err == nil
}

// paramInt returns an integer typed parameter's value.
func paramInt(v golibvirt.TypedParamValue) (int64, bool) {
	switch x := v.I.(type) {
	case int32:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		return int64(x), true
	}
	return 0, false
}

// DomainUsage implements sandbox.UsageDriver: the domain's statistics and
// its QEMU process id.
func (d *Driver) DomainUsage(ctx context.Context, name string) (sandbox.DomainUsage, error) {
	st, err := d.conn.DomainStats(ctx, name)
	if err != nil {
		return sandbox.DomainUsage{}, err
	}
	return sandbox.DomainUsage{
		State: string(st.State), PauseReason: st.PauseReason,
		CPUTimeNs: st.CPUTimeNs, RSSBytes: st.RSSBytes,
		DiskAllocationBytes: st.DiskAllocationBytes, DiskPhysicalBytes: st.DiskPhysicalBytes, DiskCapacityBytes: st.DiskCapacityBytes,
		NetRxBytes: st.NetRxBytes, NetTxBytes: st.NetTxBytes,
	}, nil
}

// DomainPID implements sandbox.UsageDriver (see Conn.DomainPID).
func (d *Driver) DomainPID(ctx context.Context, name string) (int, error) {
	return d.conn.DomainPID(ctx, name)
}

var _ sandbox.UsageDriver = (*Driver)(nil)
