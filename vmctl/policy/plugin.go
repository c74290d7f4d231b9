package policy

import (
	"net/rpc"

	plugin "github.com/hashicorp/go-plugin"
)

// ProtocolVersion is the version of the plugin protocol (the Request and
// Decision types as net/rpc's gob encodes them). A change an older plugin
// or daemon would silently misread bumps it; go-plugin's handshake then
// refuses a plugin built for another version (the daemon fails closed
// with ErrUnavailable, saying both versions).
const ProtocolVersion = 1

// Handshake is the handshake of agentbox policy plugins: the protocol
// version and go-plugin's magic cookie, which a plugin started by hand
// (not by the daemon) lacks, so it says it is a plugin and exits.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "AGENTBOX_POLICY_PLUGIN",
	MagicCookieValue: "4b1d9f0e6c2a4e58a3f7d2c1b0e9a8f7",
}

// pluginName is the one plugin a policy plugin serves.
const pluginName = "policy"

// Checker is what a plugin implements: one decision per request. An
// error fails the call closed (ErrUnavailable with the error's text);
// a refusal is a Decision with Verdict Deny.
type Checker interface {
	Check(req Request) (Decision, error)
}

// Serve serves impl as a policy plugin on go-plugin's net/rpc transport;
// a plugin's main calls it and it returns only when the daemon ends the
// plugin. Started other than by the daemon, it says so and exits 1.
func Serve(impl Checker) { serve(Handshake, impl) }

func serve(hs plugin.HandshakeConfig, impl Checker) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: hs,
		Plugins:         plugin.PluginSet{pluginName: &rpcPlugin{impl: impl}},
	})
}

// rpcPlugin is go-plugin's net/rpc Plugin of a Checker.
type rpcPlugin struct{ impl Checker }

func (p *rpcPlugin) Server(*plugin.MuxBroker) (any, error) { return &RPCServer{impl: p.impl}, nil }

func (p *rpcPlugin) Client(_ *plugin.MuxBroker, c *rpc.Client) (any, error) {
	return &rpcClient{c: c}, nil
}

// RPCServer is the net/rpc receiver in the plugin process (exported
// because net/rpc serves only exported types' methods; not for use).
type RPCServer struct{ impl Checker }

// Check answers the daemon's Plugin.Check call.
func (s *RPCServer) Check(req Request, resp *Decision) error {
	d, err := s.impl.Check(req)
	if err != nil {
		return err
	}
	*resp = d
	return nil
}

// rpcClient is the daemon's end of one plugin connection.
type rpcClient struct{ c *rpc.Client }

// check starts a Plugin.Check call; its Done channel gets the call when
// it ends.
func (r *rpcClient) check(req Request, resp *Decision) *rpc.Call {
	return r.c.Go("Plugin.Check", req, resp, make(chan *rpc.Call, 1))
}
