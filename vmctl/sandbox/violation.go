package sandbox

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/agent"
)

// ReasonProtocolViolation is the Reason of a sandbox that failed because
// its guest broke the agent protocol (agentproto.ErrProtocolViolation: a
// ping flood, a stream it opened, a malformed or oversize frame; see
// agentproto.GuardHost). Its domain is destroyed with everything it held
// on the host, as when a resumed guest does not answer; Start boots it
// again. The string is part of the API (a sandbox's reason) and never
// changes.
const ReasonProtocolViolation = "agent_protocol_violation"

// watchAgent fails sb when the session of c, its agent connection, ends
// because the guest broke the protocol (see Manager.agentViolation). The
// goroutine ends with the session (at the latest with release's Close).
func (sb *agentConn) watchAgent(c *agent.Client) {
	go func() {
		<-c.Done()
		if v := c.Violation(); v != nil {
			sb.obs.m.agentViolation(sb.Sandbox, c, v)
		}
	}()
}

// agentViolation fails sb, whose agent connection c was ended by the host
// for violation v, unless c is no longer sb's connection or sb is
// already on its way out (a Stop or Remove owns it then): the reason is
// ReasonProtocolViolation, Config.OnAgentViolation hears of v, and the
// domain goes with its cgroups, network and sockets, as at a stop. No
// other sandbox is touched.
func (m *Manager) agentViolation(sb *Sandbox, c *agent.Client, v error) {
	sb.mu.Lock()
	cur := sb.agent
	sb.mu.Unlock()
	if cur != c {
		return
	}
	if err := sb.setState(StateFailed, ReasonProtocolViolation); err != nil {
		return
	}
	m.log.Warn("guest broke the agent protocol: sandbox failed, its domain destroyed", "sandbox", sb.ID, "domain", sb.Domain, "err", v)
	if m.cfg.OnAgentViolation != nil {
		m.cfg.OnAgentViolation(sb.Record(), v)
	}
	ctx := context.Background()
	sb.release()
	derr := m.cfg.Driver.DestroyDomain(ctx, sb.Domain)
	m.cfg.Limits.Release(sb)
	sb.unwatch()
	m.teardownNetwork(ctx, sb)
	if derr != nil {
		m.log.Error("destroy the domain of a guest that broke the agent protocol", "sandbox", sb.ID, "domain", sb.Domain, "err", derr)
	}
}
