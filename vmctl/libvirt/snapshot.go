package libvirt

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/qmp"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

var _ sandbox.Snapshotter = (*Driver)(nil)

// TagPattern is what a snapshot tag must match: a letter first (QEMU and
// qemu-img also look snapshots up by their numeric id, and a leading "-"
// would read as an option), then letters, digits, "_", "." or "-"; at most
// 128 bytes.
var TagPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,127}$`)

// cleanupTimeout bounds the repair after a failed save (removing the
// partial snapshot, resuming the vCPUs), which runs even when the
// caller's ctx has ended.
const cleanupTimeout = 2 * time.Minute

func checkTag(tag string) error {
	if !TagPattern.MatchString(tag) {
		return fmt.Errorf("%w: snapshot tag %q: use a letter followed by up to 127 letters, digits, '_', '.' or '-'", sandbox.ErrInvalid, tag)
	}
	return nil
}

// StartDomainPaused is StartDomain with the vCPUs stopped
// (virDomainCreateXML with VIR_DOMAIN_START_PAUSED; QEMU RunState
// "prelaunch"), for LoadSnapshot before the guest runs. On error no domain
// is left behind.
func (d *Driver) StartDomainPaused(ctx context.Context, spec domain.Spec) error {
	return d.startDomain(ctx, spec, CreateOptions{Paused: true})
}

// PauseDomain stops the domain's vCPUs through libvirt (virDomainSuspend,
// QMP stop), so that libvirt's recorded state is "paused". A paused domain
// stays paused. It waits for a snapshot operation running on the same
// domain. Errors wrap sandbox.ErrNotRunning when the domain is gone.
func (d *Driver) PauseDomain(ctx context.Context, name string) error {
	unlock, err := d.snapLocks.lock(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	return notRunning(d.conn.SuspendDomain(ctx, name))
}

// ResumeDomain lets the domain's vCPUs run (virDomainResume, QMP cont).
// If libvirt already believes the domain running while QEMU is stopped
// (QEMU paused itself, e.g. in "restore-vm" after a failed load), QMP cont
// is sent directly. A running domain is not an error. It waits for a
// snapshot operation running on the same domain. Errors wrap
// sandbox.ErrNotRunning when the domain is gone.
func (d *Driver) ResumeDomain(ctx context.Context, name string) error {
	unlock, err := d.snapLocks.lock(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	return d.resume(ctx, d.monitor(name))
}

func (d *Driver) resume(ctx context.Context, m *qmp.Monitor) error {
	if err := d.conn.ResumeDomain(ctx, m.Domain()); err != nil {
		return notRunning(err)
	}
	st, err := m.QueryStatus(ctx)
	if err != nil {
		return notRunning(err)
	}
	if !st.Running {
		if err := m.Cont(ctx); err != nil {
			return notRunning(fmt.Errorf("resume %s from QEMU status %q: %w", m.Domain(), st.Status, err))
		}
	}
	return nil
}

// SaveSnapshot saves the domain's memory, device state and disk as the
// internal snapshot tag of its writable qcow2 overlay(s) with QMP
// snapshot-save (see qmp.Monitor.SnapshotSave): the vmstate goes into the
// first writable qcow2 format node (the overlay, never the read-only
// backing image), every writable qcow2 format node gets the disk
// snapshot. QEMU stops the vCPUs for the save (about 1 s for 256 MiB of
// RAM under TCG on a 2-core host) and starts them again.
//
// Errors: sandbox.ErrInvalid for a bad tag or a domain without a writable
// qcow2 disk; sandbox.ErrSnapshotExists when tag exists on any of its
// disks (QEMU would refuse it too); sandbox.ErrNotRunning when the domain
// is gone or not running/paused. Any other failure (e.g. "No space left
// on device" while writing the vmstate) carries QEMU's message; the
// partial snapshot is then removed and a domain that was running is
// resumed if QEMU left it stopped. Operations on the same domain are
// serialised; other domains are not blocked.
func (d *Driver) SaveSnapshot(ctx context.Context, name, tag string) error {
	if err := checkTag(tag); err != nil {
		return err
	}
	m, release, err := d.lockedMonitor(ctx, name)
	if err != nil {
		return err
	}
	defer release()

	st, err := m.QueryStatus(ctx)
	if err != nil {
		return notRunning(fmt.Errorf("save snapshot %q of %s: %w", tag, name, err))
	}
	if st.Status != "running" && st.Status != "paused" {
		return fmt.Errorf("save snapshot %q of %s: %w: QEMU status is %q, want running or paused", tag, name, sandbox.ErrNotRunning, st.Status)
	}
	nodes, err := snapshotNodes(ctx, m)
	if err != nil {
		return fmt.Errorf("save snapshot %q of %s: %w", tag, name, err)
	}
	devices := make([]string, len(nodes))
	for i, n := range nodes {
		if n.HasSnapshot(tag) {
			return fmt.Errorf("save snapshot %q of %s: %w: disk %s already holds it; pick another tag or delete it first", tag, name, sandbox.ErrSnapshotExists, n.File)
		}
		devices[i] = n.NodeName
	}
	start := time.Now()
	saveErr := m.SnapshotSave(ctx, qmp.NewJobID("agentbox-save-"), tag, devices[0], devices)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var errs []error
	if saveErr != nil {
		var je *qmp.JobError
		if errors.As(saveErr, &je) && containsFold(je.Desc, "already exists") {
			// Created by someone else meanwhile: not ours to remove.
			return fmt.Errorf("save snapshot %q of %s: %w: %w", tag, name, sandbox.ErrSnapshotExists, saveErr)
		}
		if err := d.removePartial(cctx, m, tag); err != nil {
			errs = append(errs, err)
		}
		errs = append([]error{fmt.Errorf("save snapshot %q of %s: %w", tag, name, diskFull(cctx, m, nodes[0].File, saveErr))}, errs...)
	} else {
		d.conn.log.Debug("snapshot saved", "domain", name, "tag", tag, "took", time.Since(start))
	}
	// QEMU restarts the vCPUs after a save, failed or not, when they were
	// running; make sure of it (an I/O error may have stopped them).
	if st.Running {
		if now, err := m.QueryStatus(cctx); err != nil {
			errs = append(errs, fmt.Errorf("status after saving %q: %w", tag, err))
		} else if !now.Running {
			if err := d.resume(cctx, m); err != nil {
				errs = append(errs, fmt.Errorf("resume %s after saving %q (QEMU status %q): %w", name, tag, now.Status, err))
			}
		}
	}
	return errors.Join(errs...)
}

// diskFull adds syscall.ENOSPC and the free space to a failed save's
// error when the overlay's file system is full: QEMU reports a failed
// vmstate write as "Error while writing VM state: Input/output error" (or
// with "No space left on device"), whatever the errno. It counts as full
// when the text says so, or when less free space is left than the guest
// has RAM (query-memory-size-summary), an upper bound of the vmstate.
func diskFull(ctx context.Context, m *qmp.Monitor, file string, saveErr error) error {
	var fs unix.Statfs_t
	if file == "" || unix.Statfs(filepath.Dir(file), &fs) != nil {
		return saveErr
	}
	free := fs.Bavail * uint64(fs.Bsize)
	var mem struct {
		Base uint64 `json:"base-memory"`
	}
	_ = m.Execute(ctx, "query-memory-size-summary", nil, &mem)
	if !containsFold(saveErr.Error(), "No space left") && (mem.Base == 0 || free >= mem.Base) {
		return saveErr
	}
	return fmt.Errorf("%w: %w (%d MiB free on the file system of %s, the guest has %d MiB of RAM): free space there and retry",
		saveErr, syscall.ENOSPC, free>>20, filepath.Dir(file), mem.Base>>20)
}

// removePartial deletes tag from every disk node that holds it after a
// failed save.
func (d *Driver) removePartial(ctx context.Context, m *qmp.Monitor, tag string) error {
	nodes, err := snapshotNodes(ctx, m)
	if err != nil {
		return fmt.Errorf("look for a partial snapshot %q: %w", tag, err)
	}
	held := holders(nodes, tag)
	if len(held) == 0 {
		return nil
	}
	d.conn.log.Info("removing partial snapshot after a failed save", "domain", m.Domain(), "tag", tag)
	if err := m.SnapshotDelete(ctx, qmp.NewJobID("agentbox-delete-"), tag, held); err != nil {
		return fmt.Errorf("remove partial snapshot %q: %w", tag, err)
	}
	return nil
}

// LoadSnapshot loads tag into the domain with QMP snapshot-load: memory,
// devices and disk go back to the saved instant. The domain should be
// paused (StartDomainPaused); a running domain is paused first. It is
// left paused: call ResumeDomain.
//
// Errors: sandbox.ErrNoSnapshot when a writable qcow2 disk of the domain
// lacks tag (checked before QEMU is asked, so the domain is untouched);
// sandbox.ErrInvalid for a bad tag; sandbox.ErrNotRunning when the domain
// is gone. Any other failure carries QEMU's message and QEMU's status
// ("restore-vm": the guest state is half loaded); the domain stays paused
// and must be destroyed.
func (d *Driver) LoadSnapshot(ctx context.Context, name, tag string) error {
	if err := checkTag(tag); err != nil {
		return err
	}
	m, release, err := d.lockedMonitor(ctx, name)
	if err != nil {
		return err
	}
	defer release()

	nodes, err := snapshotNodes(ctx, m)
	if err != nil {
		return notRunning(fmt.Errorf("load snapshot %q into %s: %w", tag, name, err))
	}
	devices := make([]string, len(nodes))
	for i, n := range nodes {
		if !n.HasSnapshot(tag) {
			return fmt.Errorf("load snapshot %q into %s: %w: disk %s has no snapshot %q", tag, name, sandbox.ErrNoSnapshot, n.File, tag)
		}
		devices[i] = n.NodeName
	}
	st, err := m.QueryStatus(ctx)
	if err != nil {
		return notRunning(fmt.Errorf("load snapshot %q into %s: %w", tag, name, err))
	}
	if st.Running {
		if err := d.conn.SuspendDomain(ctx, name); err != nil {
			return notRunning(fmt.Errorf("load snapshot %q into %s: pause first: %w", tag, name, err))
		}
	}
	start := time.Now()
	if err := m.SnapshotLoad(ctx, qmp.NewJobID("agentbox-load-"), tag, devices[0], devices); err != nil {
		status := "unknown"
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if now, serr := m.QueryStatus(sctx); serr == nil {
			status = now.Status
		}
		cancel()
		return fmt.Errorf("load snapshot %q into %s: %w; the domain is left paused (QEMU status %q) with a partly loaded state: destroy it", tag, name, err, status)
	}
	d.conn.log.Debug("snapshot loaded", "domain", name, "tag", tag, "took", time.Since(start))
	return nil
}

// DeleteSnapshot removes tag from every disk of the domain that holds it
// (QMP snapshot-delete), running or paused. QEMU reports success for a tag
// that does not exist, so existence is checked first: a missing tag fails
// with sandbox.ErrNoSnapshot. sandbox.ErrNotRunning when the domain is
// gone: delete from the overlay file with overlay.DeleteSnapshotOffline
// instead.
func (d *Driver) DeleteSnapshot(ctx context.Context, name, tag string) error {
	if err := checkTag(tag); err != nil {
		return err
	}
	m, release, err := d.lockedMonitor(ctx, name)
	if err != nil {
		return err
	}
	defer release()

	nodes, err := snapshotNodes(ctx, m)
	if err != nil {
		return notRunning(fmt.Errorf("delete snapshot %q of %s: %w", tag, name, err))
	}
	held := holders(nodes, tag)
	if len(held) == 0 {
		return fmt.Errorf("delete snapshot %q of %s: %w", tag, name, sandbox.ErrNoSnapshot)
	}
	if err := m.SnapshotDelete(ctx, qmp.NewJobID("agentbox-delete-"), tag, held); err != nil {
		return fmt.Errorf("delete snapshot %q of %s: %w", tag, name, err)
	}
	if nodes, err = snapshotNodes(ctx, m); err == nil {
		if left := holders(nodes, tag); len(left) > 0 {
			return fmt.Errorf("delete snapshot %q of %s: QEMU reported success but nodes %v still hold it", tag, name, left)
		}
	}
	return nil
}

func (d *Driver) monitor(name string) *qmp.Monitor {
	return qmp.New(d.conn, name, qmp.Options{Logger: d.conn.log, Gone: func(err error) bool {
		return errors.Is(err, ErrDomainNotFound) || errors.Is(err, ErrNotRunning)
	}})
}

// lockedMonitor takes name's snapshot lock (waiting at most until ctx
// ends) and opens a QMP monitor on the domain; release disconnects the
// monitor, then unlocks. Operations that change the domain's memory or
// disk state through QMP run between the two.
func (d *Driver) lockedMonitor(ctx context.Context, name string) (m *qmp.Monitor, release func(), err error) {
	unlock, err := d.snapLocks.lock(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	m = d.monitor(name)
	return m, func() {
		m.Disconnect()
		unlock()
	}, nil
}

// snapshotNodes returns the domain's writable qcow2 format nodes (the
// sandbox overlay: libvirt names it libvirt-N-format; the backing image
// is read-only and never snapshotted). A writable format node of another
// driver (libvirt-*-format, e.g. raw pflash) fails with
// sandbox.ErrInvalid naming the file.
func snapshotNodes(ctx context.Context, m *qmp.Monitor) ([]qmp.BlockNode, error) {
	all, err := m.QueryNamedBlockNodes(ctx)
	if err != nil {
		return nil, err
	}
	var nodes []qmp.BlockNode
	for _, n := range all {
		switch {
		case n.ReadOnly || n.NodeName == "":
		case n.Driver == "qcow2":
			nodes = append(nodes, n)
		case strings.HasSuffix(n.NodeName, "-format"):
			// A writable disk of another format (e.g. raw UEFI vars in
			// pflash) cannot hold a snapshot: QEMU would fail the job.
			return nil, fmt.Errorf("%w: domain %s has a writable %s disk %s (node %s), which cannot hold an internal snapshot: make it read-only or qcow2",
				sandbox.ErrInvalid, m.Domain(), n.Driver, n.File, n.NodeName)
		}
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: domain %s has no writable qcow2 disk to hold a snapshot", sandbox.ErrInvalid, m.Domain())
	}
	return nodes, nil
}

func holders(nodes []qmp.BlockNode, tag string) []string {
	var out []string
	for _, n := range nodes {
		if n.HasSnapshot(tag) {
			out = append(out, n.NodeName)
		}
	}
	return out
}

// notRunning adds sandbox.ErrNotRunning to errors saying the domain is
// gone or not running.
func notRunning(err error) error {
	if err != nil && !errors.Is(err, sandbox.ErrNotRunning) && (errors.Is(err, ErrDomainNotFound) || errors.Is(err, ErrNotRunning)) {
		return fmt.Errorf("%w: %w", sandbox.ErrNotRunning, err)
	}
	return err
}

// domainLocks serialises snapshot operations per domain; operations on
// different domains run in parallel. The zero value is ready.
type domainLocks struct {
	mu sync.Mutex
	m  map[string]*domainLock
}

type domainLock struct {
	ch   chan struct{} // holds one token while locked
	refs int
}

// lock takes name's lock, waiting at most until ctx ends.
func (l *domainLocks) lock(ctx context.Context, name string) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*domainLock)
	}
	dl := l.m[name]
	if dl == nil {
		dl = &domainLock{ch: make(chan struct{}, 1)}
		l.m[name] = dl
	}
	dl.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		dl.refs--
		if dl.refs == 0 {
			delete(l.m, name)
		}
		l.mu.Unlock()
	}
	select {
	case dl.ch <- struct{}{}:
		return func() { <-dl.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, fmt.Errorf("waiting for another snapshot operation on %s: %w", name, ctx.Err())
	}
}
