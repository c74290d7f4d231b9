package e2b

import (
	"net/http"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
)

// metrics implements GET /sandboxes/{id}/metrics: one sample from the
// sandbox's latest usage (none while it is not running). start and end
// are accepted and ignored: agentbox keeps no history. The figures are
// the host's view: memUsed is QEMU's resident memory, memTotal the
// guest's memory, diskUsed the overlay's size on the host, diskTotal the
// disk's virtual size, cpuUsedPct the QEMU process's CPU time since the
// previous call (0 on the first) over the vCPUs.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandbox(r.Context(), r)
	if err != nil {
		writeError(w, err)
		return
	}
	out := []sandboxMetric{}
	if u := sb.Usage; u != nil {
		out = append(out, sandboxMetric{
			Timestamp: u.SampledAt.UTC().Format(time.RFC3339Nano), TimestampUnix: u.SampledAt.Unix(),
			CPUCount: sb.VCPUs, CPUUsedPct: s.cpu.percent(sb.ID, u, sb.VCPUs),
			MemUsed: u.MemoryRSSBytes, MemTotal: uint64(sb.MemoryMiB) << 20,
			DiskUsed: u.DiskBytes, DiskTotal: u.DiskCapBytes,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// cpuSamples keeps the last CPU time sample of each sandbox asked for,
// to turn the cumulative CPU time into a percentage.
type cpuSamples struct {
	mu   sync.Mutex
	last map[string]api.Usage
}

// percent returns the CPU use between the previous sample of id and u,
// in percent of vcpus CPUs (0 without a previous sample or when u is
// not newer).
func (c *cpuSamples) percent(id string, u *api.Usage, vcpus int) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string]api.Usage{}
	}
	prev, ok := c.last[id]
	c.last[id] = *u
	for k, v := range c.last { // samples of sandboxes nobody asks about any more
		if u.SampledAt.Sub(v.SampledAt) > time.Hour {
			delete(c.last, k)
		}
	}
	dt := u.SampledAt.Sub(prev.SampledAt)
	if !ok || dt <= 0 || vcpus <= 0 || u.CPUTimeNs < prev.CPUTimeNs {
		return 0
	}
	return 100 * float64(u.CPUTimeNs-prev.CPUTimeNs) / float64(dt.Nanoseconds()) / float64(vcpus)
}
