package daemon

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the daemon's Prometheus metrics (names agentbox_*; units in
// the names as the Prometheus naming guide asks: _seconds, _bytes).
type metrics struct {
	reg prometheus.Registerer

	boot             prometheus.Histogram
	exec             prometheus.Histogram
	execs            *prometheus.CounterVec
	bytes            *prometheus.CounterVec
	errors           *prometheus.CounterVec
	reaped           *prometheus.CounterVec
	createFailures   prometheus.Counter
	admissionRefused prometheus.Counter
}

// latencyBuckets span 5 ms … ~80 s for exec and boot latencies (TCG
// boots take seconds, KVM execs milliseconds).
var latencyBuckets = prometheus.ExponentialBuckets(0.005, 2, 15)

func newMetrics(reg prometheus.Registerer, d *core) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		reg: reg,
		boot: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentbox_sandbox_boot_seconds", Help: "Time from domain start to the guest agent's handshake.", Buckets: latencyBuckets,
		}),
		exec: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentbox_exec_duration_seconds", Help: "Wall time of attached execs, from request to exit status.", Buckets: latencyBuckets,
		}),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_execs_total", Help: "Commands run, by mode (attached, detached) and result (ok: exit 0, exit: nonzero, error).",
		}, []string{"mode", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_bytes_total", Help: "Bytes moved between callers and sandboxes, by direction (in: to the guest, out: from it) and kind (stdio, file, port: forwarded connections).",
		}, []string{"direction", "kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_daemon_errors_total", Help: "Daemon-side failures by code (API error codes, audit_write).",
		}, []string{"code"}),
		reaped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_sandboxes_reaped_total", Help: "Sandboxes removed by the TTL or idle reaper, by reason.",
		}, []string{"reason"}),
		createFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbox_sandbox_create_failures_total", Help: "Create requests that did not produce a running sandbox.",
		}),
		admissionRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentbox_admission_refused_total", Help: "Creates refused because the host's capacity would be exceeded.",
		}),
	}
	reg.MustRegister(m.boot, m.exec, m.execs, m.bytes, m.errors, m.reaped, m.createFailures, m.admissionRefused,
		&stateCollector{d: d})
	if r, ok := reg.(*prometheus.Registry); ok {
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// stateCollector reports gauges read at scrape time: sandboxes by state
// and the capacity figures of admission control.
type stateCollector struct{ d *core }

var (
	sandboxesDesc = prometheus.NewDesc("agentbox_sandboxes", "Sandboxes by lifecycle state.", []string{"state"}, nil)
	capacityDesc  = prometheus.NewDesc("agentbox_capacity", "Host capacity for sandboxes: memory_mib and vcpus the daemon may commit.", []string{"resource"}, nil)
	committedDesc = prometheus.NewDesc("agentbox_committed", "Capacity committed to live sandboxes: memory_mib and vcpus.", []string{"resource"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sandboxesDesc
	ch <- capacityDesc
	ch <- committedDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{"creating": 0, "running": 0, "stopping": 0, "stopped": 0, "failed": 0}
	for _, sb := range c.d.mgr.List() {
		counts[string(sb.State())]++
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), st)
	}
	used := c.d.mgr.Resources()
	ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(c.d.adm.memoryMiB), "memory_mib")
	ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(c.d.adm.vcpus), "vcpus")
	ch <- prometheus.MustNewConstMetric(committedDesc, prometheus.GaugeValue, float64(used.UsedMemoryMiB), "memory_mib")
	ch <- prometheus.MustNewConstMetric(committedDesc, prometheus.GaugeValue, float64(used.UsedVCPUs), "vcpus")
}
