package sandbox

import "github.com/agentbox/agentbox/vmctl/agent"

// SetAgentForTest gives sb the agent connection c, as a build's running
// step does (the one it had is closed), so that a test can put a hostile
// guest behind a running sandbox.
func SetAgentForTest(sb *Sandbox, c *agent.Client) {
	sb.mu.Lock()
	old := sb.agent
	sb.agent = c
	sb.mu.Unlock()
	if old != nil {
		old.Close()
	}
	sb.watchAgent(c)
}
