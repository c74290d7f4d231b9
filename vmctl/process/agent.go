package process

import "github.com/agentbox/agentbox/vmctl/agent"

var _ Guest = (*agent.Client)(nil)
