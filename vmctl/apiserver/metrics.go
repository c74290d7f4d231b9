package apiserver

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// serverMetrics are the API server's own Prometheus metrics.
type serverMetrics struct {
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// newServerMetrics registers the server's metrics with reg.
func newServerMetrics(reg prometheus.Registerer) (*serverMetrics, error) {
	m := &serverMetrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_api_errors_total",
			Help: "API error answers (and errors inside streams) by stable error code.",
		}, []string{"code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentbox_api_request_duration_seconds",
			Help: "API request durations by route pattern, method and status; streams (exec, events) count until they end.",
			// 1 ms to about 4.4 min.
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"route", "method", "status"}),
	}
	for _, c := range []prometheus.Collector{m.errors, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the API metrics: %w", err)
		}
	}
	return m, nil
}

// countError counts one error answer.
func (s *Server) countError(code string) {
	if s.m != nil {
		s.m.errors.WithLabelValues(code).Inc()
	}
}

// observe records a request's duration.
func (s *Server) observe(route, method string, status int, d time.Duration) {
	if s.m == nil {
		return
	}
	s.m.duration.WithLabelValues(route, method, strconv.Itoa(status)).Observe(d.Seconds())
}
