package daemon

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// qemuView reads the confinement of sb's QEMU process (uid, gid, groups,
// seccomp mode from /proc/PID/status) for GET /v1/sandboxes/{id}; nil
// when no QEMU runs or the driver cannot name its process.
func (d *Daemon) qemuView(ctx context.Context, sb *sandbox.Sandbox) *api.QEMUProcess {
	ud, ok := d.cfg.Driver.(sandbox.UsageDriver)
	if !ok || sb.State().Final() || sb.Record().PausedToDisk() {
		return nil
	}
	pid, err := ud.DomainPID(ctx, sb.Domain)
	if err != nil {
		return nil
	}
	st, err := sandbox.ReadProcStatus(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	v := &api.QEMUProcess{PID: pid, UID: st.UID, GID: st.GID, Groups: st.Groups, Seccomp: st.Seccomp}
	if v.Groups == nil {
		v.Groups = []uint32{}
	}
	if u := sb.Record().QEMUUser; u != nil {
		v.ConfiguredUID = u.UID
	}
	return v
}
