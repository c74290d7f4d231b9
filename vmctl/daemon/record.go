package daemon

import "github.com/agentbox/agentbox/vmctl/sandbox"

// Record returns the sandbox manager's record of sandbox ref (ID or
// name): besides what the API shows, its paths on this host (directory,
// overlay, console log, agent socket). The in-process front of `agentbox
// run` prints them for a sandbox it leaves running (--keep), whose files
// only this host can reach. Errors: sandbox.ErrNotFound (errdefs not
// found).
func (c *core) Record(ref string) (sandbox.Record, error) {
	sb, err := c.mgr.Get(ref)
	if err != nil {
		return sandbox.Record{}, err
	}
	return sb.Record(), nil
}
