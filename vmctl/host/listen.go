package host

import (
	"errors"
	"fmt"
	"net"
	"os/user"
	"strconv"

	"github.com/agentbox/agentbox/vmctl/apiserver"
)

// Listen checks that o may serve ListenTCP (apiserver.CheckTCP: a token,
// tenants or TLS requiring client certificates) and returns serve's API
// listeners: systemd's (socket activation) if any, each TCP one checked
// the same way, else the unix socket o.Socket (mode 0660, group
// o.SocketGroup; bound in a private directory and given its path only
// once its mode is set, apiserver.ListenUnix) and, with o.ListenTCP, a
// TCP listener. A refusal leaves no listener open and no socket file.
// Start calls it first, so a second daemon on the same socket fails
// before it touches libvirt or the store; `serve --network-cleanup`
// calls it alone to hold the socket while it cleans up. The caller
// closes the listeners.
func Listen(o Options) ([]net.Listener, error) {
	var cfg apiserver.Config
	apiAuth(o.Auth, keyring(o.Auth, false), &cfg) // auth.go; the peers' secret requires none
	if o.ListenTCP != "" {
		if err := apiserver.CheckTCP(cfg, o.ListenTCP); err != nil {
			return nil, err
		}
	}
	ls, err := apiserver.ActivationListeners()
	if err != nil {
		return nil, fmt.Errorf("systemd socket activation: %w", err)
	}
	if len(ls) > 0 {
		if err := checkActivated(cfg, ls); err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, err
		}
		return ls, nil
	}
	gid := -1
	if g := o.SocketGroup; g != "" {
		if gid, err = lookupGroup(g); err != nil {
			return nil, err
		}
	}
	if o.Socket == "" {
		return nil, errors.New("no --socket: give the unix socket path the API listens on")
	}
	ul, err := apiserver.ListenUnix(o.Socket, 0o660, gid)
	if err != nil {
		return nil, err
	}
	ls = append(ls, ul)
	if o.ListenTCP != "" {
		tl, err := net.Listen("tcp", o.ListenTCP)
		if err != nil {
			ul.Close()
			return nil, fmt.Errorf("--listen-tcp: %w", err)
		}
		ls = append(ls, tl)
	}
	return ls, nil
}

// checkActivated runs apiserver.CheckTCP on each of systemd's listeners
// that is not a unix socket, so that an unauthenticated TCP socket unit
// fails Start before anything is built rather than when it is served.
func checkActivated(cfg apiserver.Config, ls []net.Listener) error {
	for _, l := range ls {
		if l.Addr().Network() == "unix" {
			continue
		}
		if err := apiserver.CheckTCP(cfg, l.Addr().String()); err != nil {
			return fmt.Errorf("systemd socket activation: %w", err)
		}
	}
	return nil
}

// lookupGroup resolves a group name or number.
func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("--socket-group %q: %w", g, err)
	}
	return strconv.Atoi(grp.Gid)
}
