package process

import "github.com/agentbox/agentbox/vmctl/agentproto"

// Sentinel errors of a Table: the detached-process errors of the agent
// protocol, which the guest's table fails with too, so one value means
// the same at both ends. Methods return them wrapped with the process id
// (test with errors.Is); the guest's error codes (agentproto's
// CodeProcExited, CodeStdinClosed, CodeProcLimit, …) are mapped to them
// (agentproto.ProcSentinel). See agentproto.ErrProcNotFound and the rest
// for what each means.
var (
	ErrNotFound    = agentproto.ErrProcNotFound
	ErrExists      = agentproto.ErrProcExists
	ErrExited      = agentproto.ErrProcExited
	ErrStdinClosed = agentproto.ErrProcStdinClosed
	ErrDropped     = agentproto.ErrProcDropped
	ErrTooMany     = agentproto.ErrProcLimit
	ErrNoTty       = agentproto.ErrProcNoTty
	ErrClosed      = agentproto.ErrProcTableClosed
)

// DroppedError is the error of Output when offset is below the oldest
// byte the guest's ring still holds. errors.Is(err, ErrDropped) holds for
// it.
type DroppedError = agentproto.ProcDroppedError
