package qmp

import (
	"context"
)

// Status is the reply of query-status (QAPI StatusInfo).
type Status struct {
	// Status is QEMU's RunState: "running", "paused", "prelaunch",
	// "restore-vm" (a snapshot load failed or is in progress), "save-vm",
	// "io-error", "shutdown", ...
	Status string `json:"status"`
	// Running is true while the vCPUs run.
	Running bool `json:"running"`
}

// QueryStatus sends query-status.
func (m *Monitor) QueryStatus(ctx context.Context) (Status, error) {
	var s Status
	err := m.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// Stop sends stop: the vCPUs pause (block I/O is drained and flushed).
// Prefer libvirt's virDomainSuspend where libvirt manages the domain, so
// that libvirt's idea of the state stays right.
func (m *Monitor) Stop(ctx context.Context) error { return m.Execute(ctx, "stop", nil, nil) }

// Cont sends cont: the vCPUs run again (also from "restore-vm" after a
// failed snapshot load). Prefer libvirt's virDomainResume where libvirt
// manages the domain.
func (m *Monitor) Cont(ctx context.Context) error { return m.Execute(ctx, "cont", nil, nil) }

// BlockNode is one entry of query-named-block-nodes (QAPI BlockDeviceInfo),
// reduced to what snapshots need.
type BlockNode struct {
	// NodeName is the node name, e.g. "libvirt-1-format" (libvirt ≥ 5.10
	// with -blockdev names the format and protocol layers of disk N
	// libvirt-N-format and libvirt-N-storage).
	NodeName string `json:"node-name"`
	// Driver is the block driver, e.g. "qcow2", "raw", "file".
	Driver string `json:"drv"`
	// ReadOnly is true for read-only nodes such as backing files.
	ReadOnly bool `json:"ro"`
	// File is the file name of the node's image.
	File string `json:"file"`
	// BackingFileDepth is the number of backing files below the node.
	BackingFileDepth int `json:"backing_file_depth"`
	// Image is QEMU's image info of the node.
	Image ImageInfo `json:"image"`
}

// ImageInfo is the part of QAPI ImageInfo snapshots need.
type ImageInfo struct {
	// Filename is the image file.
	Filename string `json:"filename"`
	// Format is the image format, e.g. "qcow2".
	Format string `json:"format"`
	// VirtualSize is the guest-visible size in bytes.
	VirtualSize int64 `json:"virtual-size"`
	// Snapshots are the image's internal snapshots (qcow2).
	Snapshots []SnapshotInfo `json:"snapshots"`
}

// SnapshotInfo is one internal snapshot (QAPI SnapshotInfo).
type SnapshotInfo struct {
	// ID is the image's numeric snapshot id, as a string.
	ID string `json:"id"`
	// Name is the tag given at save.
	Name string `json:"name"`
	// VMStateSize is the size of the saved memory and device state, in
	// bytes (0 for a disk-only snapshot).
	VMStateSize uint64 `json:"vm-state-size"`
	// DateSec and DateNsec are the host wall-clock time of the save.
	DateSec  int64 `json:"date-sec"`
	DateNsec int64 `json:"date-nsec"`
	// VMClockSec and VMClockNsec are the guest's run time at the save.
	VMClockSec  int64 `json:"vm-clock-sec"`
	VMClockNsec int64 `json:"vm-clock-nsec"`
}

// HasSnapshot reports whether the node's image holds a snapshot named tag.
func (n BlockNode) HasSnapshot(tag string) bool {
	for _, s := range n.Image.Snapshots {
		if s.Name == tag {
			return true
		}
	}
	return false
}

// QueryNamedBlockNodes sends query-named-block-nodes with flat=true (QEMU
// ≥ 5.0: no recursion into backing images).
func (m *Monitor) QueryNamedBlockNodes(ctx context.Context) ([]BlockNode, error) {
	var nodes []BlockNode
	err := m.Execute(ctx, "query-named-block-nodes", map[string]any{"flat": true}, &nodes)
	return nodes, err
}

// Job is one entry of query-jobs (QAPI JobInfo).
type Job struct {
	// ID is the job id given when the job was started.
	ID string `json:"id"`
	// Type is the job type, e.g. "snapshot-save".
	Type string `json:"type"`
	// Status is the job status: "created", "running", "paused", "ready",
	// "standby", "waiting", "pending", "aborting", "concluded", "null".
	Status string `json:"status"`
	// CurrentProgress and TotalProgress are QEMU's progress counters.
	CurrentProgress int64 `json:"current-progress"`
	TotalProgress   int64 `json:"total-progress"`
	// Error is set once a job concluded with a failure: QEMU's message.
	// It is the only place a snapshot job's failure is reported.
	Error string `json:"error,omitempty"`
}

// QueryJobs sends query-jobs.
func (m *Monitor) QueryJobs(ctx context.Context) ([]Job, error) {
	var jobs []Job
	err := m.Execute(ctx, "query-jobs", nil, &jobs)
	return jobs, err
}

// JobDismiss sends job-dismiss: a concluded job is removed from
// query-jobs (and its id may be used again).
func (m *Monitor) JobDismiss(ctx context.Context, id string) error {
	return m.Execute(ctx, "job-dismiss", map[string]string{"id": id}, nil)
}

// JobCancel sends job-cancel.
func (m *Monitor) JobCancel(ctx context.Context, id string) error {
	return m.Execute(ctx, "job-cancel", map[string]string{"id": id}, nil)
}
