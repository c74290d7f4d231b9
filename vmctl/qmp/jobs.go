package qmp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// JobError is a job that concluded with QEMU's "error" member set (see
// [Job.Error]).
type JobError struct {
	// ID and Type identify the job.
	ID, Type string
	// Desc is QEMU's message, e.g. "Snapshot 't1' already exists in one
	// or more devices" or "Error while writing VM state: No space left on
	// device".
	Desc string
}

// Error implements error.
func (e *JobError) Error() string {
	return fmt.Sprintf("qemu job %s (%s) failed: %s", e.ID, e.Type, e.Desc)
}

// Time bounds of RunJob beyond the caller's context.
const (
	// cancelWait is how long RunJob keeps waiting for a job to conclude
	// after its caller's ctx ended (and job-cancel was sent), so that the
	// job can still be dismissed.
	cancelWait = 2 * time.Minute
	// dismissTimeout bounds the job-dismiss call.
	dismissTimeout = 30 * time.Second
)

// NewJobID returns prefix followed by 8 random hex digits, a job id no
// other caller will use.
func NewJobID(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// RunJob starts a QMP job command (verb with args, whose "job-id" must be
// id) and waits until the job concludes: it subscribes to the domain's
// events before sending the command and waits for JOB_STATUS_CHANGE with
// status "concluded" for id, polling query-jobs every
// Options.PollInterval as well (and at once after a gap in the event
// stream), since events may be lost across a reconnection. It then reads
// the job's "error" member and always sends job-dismiss.
//
// Errors: the command's own error reply (a [ReplyError]: no job was
// created; a command that failed in transit is followed by query-jobs, and
// if the job exists it is waited for as usual); a
// *[JobError] when the job concluded with an error; an error saying the
// job vanished when query-jobs no longer lists it before it concluded
// (QEMU restarted, or someone else dismissed it), or that the domain is
// gone (Options.Gone). When ctx ends first,
// RunJob sends job-cancel, waits up to two more minutes for the job to
// conclude so that it can still be dismissed, and returns an error
// wrapping ctx.Err() (joined with the job's error, if any).
func (m *Monitor) RunJob(ctx context.Context, id, verb string, args any) error {
	// The subscription outlives ctx: after a cancel the job is still
	// waited for and dismissed.
	evctx, stopEvents := context.WithCancel(context.WithoutCancel(ctx))
	events, err := m.t.MonitorEvents(evctx, m.domain)
	if err != nil {
		m.log.Debug("no qmp events; polling query-jobs only", slog.String("job", id), slog.Any("err", err))
		events = nil
	}
	defer func() {
		stopEvents()
		if events != nil {
			go func(ch <-chan Event) {
				for range ch { // until the transport closes it
				}
			}(events)
		}
	}()

	start := time.Now()
	if err := m.Execute(ctx, verb, args, nil); err != nil {
		var re ReplyError
		if errors.As(err, &re) || !m.jobListed(ctx, id) {
			return err
		}
		// The command was delivered although its reply was lost (the
		// transport reconnected meanwhile): wait for the job as usual.
		m.log.Info("job started although its command failed in transit; waiting for it", slog.String("job", id), slog.Any("err", err))
	}
	job, err := m.waitJob(ctx, id, &events)
	if err != nil && ctx.Err() != nil {
		cause := err
		dctx := context.WithoutCancel(ctx)
		if cerr := m.JobCancel(dctx, id); cerr != nil {
			m.log.Debug("job-cancel", slog.String("job", id), slog.Any("err", cerr))
		}
		wctx, cancel := context.WithTimeout(dctx, cancelWait)
		job, err = m.waitJob(wctx, id, &events)
		cancel()
		if err != nil {
			return fmt.Errorf("qmp %s job %s on %s: %w; the job did not conclude within %s after job-cancel: %w", verb, id, m.domain, cause, cancelWait, err)
		}
		m.dismiss(dctx, id)
		if job.Error != "" {
			return errors.Join(cause, &JobError{ID: id, Type: job.Type, Desc: job.Error})
		}
		return cause
	}
	if err != nil {
		return fmt.Errorf("qmp %s job %s on %s: %w", verb, id, m.domain, err)
	}
	m.dismiss(context.WithoutCancel(ctx), id)
	m.log.Debug("qmp job concluded", slog.String("job", id), slog.String("type", job.Type),
		slog.Duration("took", time.Since(start)), slog.String("error", job.Error))
	if job.Error != "" {
		return &JobError{ID: id, Type: job.Type, Desc: job.Error}
	}
	return nil
}

// jobListed reports whether query-jobs lists id (false when it cannot
// be asked).
func (m *Monitor) jobListed(ctx context.Context, id string) bool {
	jobs, err := m.QueryJobs(ctx)
	if err != nil {
		return false
	}
	for _, j := range jobs {
		if j.ID == id {
			return true
		}
	}
	return false
}

// dismiss sends job-dismiss. A failure is logged, not returned: the job's
// outcome is known, and a left-over concluded job only occupies its id.
func (m *Monitor) dismiss(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, dismissTimeout)
	defer cancel()
	if err := m.JobDismiss(ctx, id); err != nil {
		m.log.Warn("job-dismiss failed; the concluded job stays listed in query-jobs", slog.String("job", id), slog.Any("err", err))
	}
}

// waitJob waits until query-jobs shows job id concluded and returns it.
// *events is set to nil when the event stream ends (polling goes on).
func (m *Monitor) waitJob(ctx context.Context, id string, events *<-chan Event) (Job, error) {
	tick := time.NewTicker(m.opts.PollInterval)
	defer tick.Stop()
	var lastErr error
	check := func() (Job, bool, error) {
		jobs, err := m.QueryJobs(ctx)
		if err != nil && m.opts.Gone != nil && m.opts.Gone(err) {
			return Job{}, false, fmt.Errorf("job %s: the domain is gone: %w", id, err)
		}
		if err != nil {
			// The transport may be reconnecting: retry on the next tick.
			lastErr = err
			return Job{}, false, nil
		}
		for _, j := range jobs {
			if j.ID == id {
				return j, j.Status == "concluded", nil
			}
		}
		return Job{}, false, fmt.Errorf("job %s is no longer listed by query-jobs before it concluded (QEMU restarted, or the job was dismissed by someone else)", id)
	}
	// The job may have concluded before the first event could be read.
	if j, done, err := check(); done || err != nil {
		return j, err
	}
	for {
		select {
		case ev, ok := <-*events:
			if !ok {
				m.log.Debug("qmp event stream ended; polling query-jobs", slog.String("job", id))
				*events = nil
				continue
			}
			if !ev.Gap && (ev.Name != "JOB_STATUS_CHANGE" || !concludedEvent(ev, id)) {
				continue
			}
		case <-tick.C:
		case <-ctx.Done():
			if lastErr != nil {
				return Job{}, fmt.Errorf("%w (last query-jobs: %v)", ctx.Err(), lastErr)
			}
			return Job{}, ctx.Err()
		}
		if j, done, err := check(); done || err != nil {
			return j, err
		}
	}
}

// concludedEvent reports whether ev is JOB_STATUS_CHANGE of job id to
// "concluded" (data: {"id":ID,"status":STATUS}).
func concludedEvent(ev Event, id string) bool {
	var d struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	return json.Unmarshal(ev.Data, &d) == nil && d.ID == id && d.Status == "concluded"
}

// snapshotArgs are the arguments of snapshot-save and snapshot-load
// (QAPI; all members required) and snapshot-delete (no vmstate).
type snapshotArgs struct {
	JobID   string   `json:"job-id"`
	Tag     string   `json:"tag"`
	VMState string   `json:"vmstate,omitempty"`
	Devices []string `json:"devices"`
}

// SnapshotSave runs the snapshot-save job (QEMU ≥ 6.0): the VM's memory and
// device state go into the block node vmstate, and every node in devices
// (block node names, e.g. "libvirt-1-format") gets an internal snapshot
// named tag. QEMU stops the vCPUs for the save and starts them again
// afterwards if they were running. QEMU refuses a tag that exists on any
// of devices (the *JobError says "already exists"). See [Monitor.RunJob]
// for waiting and errors.
func (m *Monitor) SnapshotSave(ctx context.Context, jobID, tag, vmstate string, devices []string) error {
	return m.RunJob(ctx, jobID, "snapshot-save", snapshotArgs{JobID: jobID, Tag: tag, VMState: vmstate, Devices: devices})
}

// SnapshotLoad runs the snapshot-load job: memory and device state are
// read from vmstate and every node in devices is reverted to tag. The
// vCPUs are stopped for the load and run afterwards only if they ran
// before; a failed load leaves QEMU in RunState "restore-vm" (paused).
// See [Monitor.RunJob] for waiting and errors.
func (m *Monitor) SnapshotLoad(ctx context.Context, jobID, tag, vmstate string, devices []string) error {
	return m.RunJob(ctx, jobID, "snapshot-load", snapshotArgs{JobID: jobID, Tag: tag, VMState: vmstate, Devices: devices})
}

// SnapshotDelete runs the snapshot-delete job, removing tag from every
// node in devices. QEMU reports success for a tag that does not exist:
// check [BlockNode.HasSnapshot] first. See [Monitor.RunJob].
func (m *Monitor) SnapshotDelete(ctx context.Context, jobID, tag string, devices []string) error {
	return m.RunJob(ctx, jobID, "snapshot-delete", snapshotArgs{JobID: jobID, Tag: tag, Devices: devices})
}
