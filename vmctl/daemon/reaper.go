package daemon

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// reaper removes sandboxes whose paused TTL is reached, and takes the
// TTL or idle action (lapse, lifecycle.go: remove, stop, pause,
// pause-to-disk) of those whose TTL or idle timeout is, checking every
// Config.ReapInterval until ctx ends.
func (s *lifecycleService) reaper(ctx context.Context) {
	defer close(s.reaperDone)
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, b := range s.allBoxes() {
				switch why := b.sb.Expired(now); why {
				case "":
				case sandbox.ExpiredIdle, sandbox.ExpiredTTL:
					s.lapse(b, why, now) // lifecycle.go
				default:
					s.reap(b, why)
				}
			}
		}
	}
}

// reap removes b's sandbox (force) and audits why.
func (s *lifecycleService) reap(b *box, why string) {
	start := time.Now()
	err := s.mgr.Remove(context.Background(), b.sb, true)
	e := auditEntry(start, b.sb.ID, "daemon", audit.ActionReap, map[string]any{"reason": why})
	e.DurationMs = ms(time.Since(start))
	if err != nil {
		e.Error, e.ErrorMessage = api.ErrorFrom(err).Code, err.Error()
		s.log.Warn("reap sandbox", "sandbox", b.sb.ID, "reason", why, "err", err)
	} else {
		s.log.Info("sandbox reaped", "sandbox", b.sb.ID, "reason", why)
	}
	s.appendAudit(e) // before the exec records' fsync: the sandbox is gone from the API already
	if err == nil {
		s.store.DeleteExecs(b.sb.ID)
	}
	s.metrics.reaped.WithLabelValues(why).Inc()
}
