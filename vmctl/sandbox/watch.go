package sandbox

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// Watch starts watching the guest path p (recursive: the directories
// below it too) and returns once the guest has the watch in place (see
// agent.Client.Watch); ctx bounds the watch, the caller closes the
// Watcher. Next's errors are the agent's: pass them to Explain. It does no
// accounting (Busy). Errors: ErrNotRunning; the agent's, explained.
func (sb *agentConn) Watch(ctx context.Context, p string, recursive bool) (*agent.Watcher, error) {
	c, err := sb.agentFor()
	if err != nil {
		return nil, err
	}
	w, err := c.Watch(ctx, agentproto.WatchRequest{Path: p, Recursive: recursive})
	return w, sb.explain(ctx, err)
}
