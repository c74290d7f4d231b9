package main

import (
	"errors"
	"log/slog"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
)

// bootNetwork configures the NIC from the kernel command line's
// agentbox.net= value (set by the host for a sandbox whose network policy
// is not none; see vmctl/network). Without it the guest has only lo. A
// failure is logged on the console and leaves the guest without network;
// the agent serves anyway so the host can see why.
func bootNetwork(log *slog.Logger, value string) {
	if value == "" {
		return
	}
	req, err := agentproto.ParseNetworkConfig(value)
	if err == nil {
		err = guestagent.ConfigureNetwork(req)
	}
	if errors.Is(err, guestagent.ErrGatewayUnpinned) {
		log.Warn("network configured from the kernel command line; its gateway resolves by ARP", "agentbox.net", value, "err", err)
		return
	}
	if err != nil {
		log.Error("network configuration from the kernel command line failed", "agentbox.net", value, "err", err)
		return
	}
	log.Info("network configured", "agentbox.net", value)
}
