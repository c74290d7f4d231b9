package host

import (
	"errors"
	"fmt"
	"net"
	"os/user"
	"strconv"

	"github.com/agentbox/agentbox/vmctl/apiserver"
)

// Listen checks that o may serve ListenTCP (apiserver.CheckTCP) and
// returns serve's API listeners: systemd's (socket activation) if any,
// else the unix socket o.Socket (mode 0660, group o.SocketGroup) and,
// with o.ListenTCP, a TCP listener. Start calls it first, so a second
// daemon on the same socket fails before it touches libvirt or the store;
// `serve --network-cleanup` calls it alone to hold the socket while it
// cleans up. The caller closes the listeners.
func Listen(o Options) ([]net.Listener, error) {
	if o.ListenTCP != "" {
		var cfg apiserver.Config
		apiAuth(o.Auth, keyring(o.Auth, false), &cfg) // auth.go; the peers' secret requires none
		if err := apiserver.CheckTCP(cfg, o.ListenTCP); err != nil {
			return nil, err
		}
	}
	ls, err := apiserver.ActivationListeners()
	if err != nil {
		return nil, fmt.Errorf("systemd socket activation: %w", err)
	}
	if len(ls) > 0 {
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
