package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// ErrReseedUnsupported is returned (wrapped) by ReseedGuest when the
// guest's agent predates agentproto.OpReseed: the guest keeps the random
// state its memory was saved with, unless its kernel's vmgenid driver
// reseeded it (domain.Spec.GenID).
var ErrReseedUnsupported = errdefs.New(errdefs.ErrNotImplemented, "", "the guest agent cannot reseed the guest's random number generator (it predates the reseed operation): rebuild the image with a current agent")

// ReseedGuest gives the guest behind c fresh randomness (agent.Client.Reseed):
// host random bytes credited to its kernel's pool and its CRNG reseeded.
// Every path where a guest continues from saved memory calls it before
// the guest runs anything for a caller: a restore (vmctl/sandbox/snapshot),
// a resume from disk. Errors: ErrReseedUnsupported from an older agent;
// the agent's.
func ReseedGuest(ctx context.Context, c *agent.Client) error {
	_, err := c.Reseed(ctx)
	var pe *agentproto.Error
	if errors.As(err, &pe) && pe.Code == agentproto.CodeInvalid && strings.Contains(pe.Message, "unknown op") {
		return fmt.Errorf("%w: %v", ErrReseedUnsupported, err)
	}
	if err != nil {
		return fmt.Errorf("reseed the guest's random number generator: %w", err)
	}
	return nil
}

// Reseed is ReseedGuest on the running sandbox's agent. Errors:
// ErrNotRunning; ReseedGuest's.
func (sb *agentConn) Reseed(ctx context.Context) error {
	c, err := sb.agentFor()
	if err != nil {
		return err
	}
	return ReseedGuest(ctx, c)
}
