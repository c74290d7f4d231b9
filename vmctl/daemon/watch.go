package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

var _ backend.WatchBackend = (*Daemon)(nil)

// Watch implements backend.WatchBackend. A watch is a file operation
// that lasts: the sandbox is busy (never idle) while it runs and active
// when it ends, like an attached exec; it ends with the sandbox's life
// (stop, removal: ErrNotRunning, not the guest's death) and is audited when it ends (file.watch,
// with the number of events sent). It does not hold up Shutdown: the API
// server ends its streams first.
func (s *filesService) Watch(ctx context.Context, ref, p string, recursive bool, ready func() error, emit func(api.WatchEvent) error) error {
	ctx, err := s.policyFile(ctx, ref, audit.ActionWatch, p, "", nil) // policy.go
	if err != nil {
		return err
	}
	b, err := s.running(ctx, ref)
	if err != nil {
		return err
	}
	done := b.sb.Busy()
	defer done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.life, cancel)
	defer stop()

	start := time.Now()
	var events int64
	err = watch(ctx, b.sb, p, recursive, ready, func(ev api.WatchEvent) error {
		events++
		return emit(ev)
	})
	switch st := b.sb.State(); {
	case err == nil:
	case b.life.Err() != nil || st == sandbox.StateStopping || st == sandbox.StateStopped:
		// Stopped or removed under the watch: not the guest's death.
		err = sandbox.ErrNotRunning.WithMessage(fmt.Sprintf("sandbox %s is %s: the watch of %s ended", b.sb.ID, st, p))
	case ctx.Err() != nil:
		err = nil // the client went
	}
	s.appendAudit(s.requestEntry(ctx, b.sb.ID, audit.ActionWatch, map[string]any{audit.ArgPath: p, audit.ArgRecursive: recursive, audit.ArgEvents: events}, start, err))
	return err
}

// watch runs one watch of sb: ready once it is in place, then emit per
// event until ctx ends or the watched path went away.
func watch(ctx context.Context, sb *sandbox.Sandbox, p string, recursive bool, ready func() error, emit func(api.WatchEvent) error) error {
	w, err := sb.Watch(ctx, p, recursive)
	var pe *agentproto.Error
	if errors.As(err, &pe) && pe.Code == agentproto.CodeNotFound {
		return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("%s in sandbox %s: create it first, or watch its parent", pe.Message, sb.ID))
	}
	if err != nil {
		return err
	}
	defer w.Close()
	if err := ready(); err != nil {
		return err
	}
	for {
		batch, err := w.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return sb.Explain(err)
		}
		for _, ev := range batch {
			if err := emit(watchEvent(ev)); err != nil {
				return err
			}
		}
	}
}

// watchEvent converts the agent's event.
func watchEvent(ev agentproto.WatchEvent) api.WatchEvent {
	out := api.WatchEvent{Op: string(ev.Op), Path: ev.Path, To: ev.To, Time: time.Unix(0, ev.TimeNs).UTC()}
	if ev.Info != nil {
		at := ev.Path
		if ev.To != "" {
			at = ev.To
		}
		fi := fileInfo(at, *ev.Info)
		out.Info = &fi
	}
	return out
}
