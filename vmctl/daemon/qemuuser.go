package daemon

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// qemuView reads the confinement of sb's QEMU process (uid, gid, groups,
// seccomp mode from /proc/PID/status) for GET /v1/sandboxes/{id}; nil
// when no QEMU runs or the driver cannot name its process. The pid is
// asked of libvirt once and kept until the sandbox's record changes
// (onChange), so that a GET, which every E2B data-plane request makes,
// stays an in-memory lookup and a file read.
func (c *core) qemuView(ctx context.Context, sb *sandbox.Sandbox) *api.QEMUProcess {
	ud, ok := c.cfg.Driver.(sandbox.UsageDriver)
	if !ok {
		return nil
	}
	r := sb.Record()
	if r.State.Final() || r.PausedToDisk() {
		return nil
	}
	pid, cached := 0, false
	if v, ok := c.qemuPIDs.Load(sb.ID); ok {
		pid, cached = v.(int), true
	} else if p, err := ud.DomainPID(ctx, sb.Domain); err == nil {
		pid = p
		c.qemuPIDs.Store(sb.ID, pid)
	} else {
		return nil
	}
	st, err := sandbox.ReadProcStatus(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		c.qemuPIDs.Delete(sb.ID)
		if cached { // a process gone without a record change: ask again
			return c.qemuView(ctx, sb)
		}
		return nil
	}
	v := &api.QEMUProcess{PID: pid, UID: st.UID, GID: st.GID, Groups: st.Groups, Seccomp: st.Seccomp}
	if v.Groups == nil {
		v.Groups = []uint32{}
	}
	if u := r.QEMUUser; u != nil {
		v.ConfiguredUID = u.UID
	}
	return v
}
