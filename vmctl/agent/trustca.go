package agent

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// TrustCA makes the guest trust the CA certificate pemText (one PEM
// "CERTIFICATE" block): the guest agent writes it to
// agentproto.TrustCAFile and appends it to agentproto.TrustCABundle
// unless it is there already (agentproto.OpTrustCA). The daemon sends it
// after every boot of a sandbox with secrets. Errors: *agentproto.Error
// with CodeInvalid for a malformed certificate or from an agent older than
// the operation ("unknown op"), else the guest's file error.
func (c *Client) TrustCA(ctx context.Context, pemText string) error {
	return c.call(ctx, "trust-ca", &agentproto.Request{Op: agentproto.OpTrustCA, TrustCA: &agentproto.TrustCARequest{PEM: pemText}}, nil)
}
