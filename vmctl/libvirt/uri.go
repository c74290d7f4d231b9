package libvirt

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DefaultURI is the libvirt URI used when [Config.URI] is empty: the
// system-wide QEMU driver of the local libvirtd.
const DefaultURI = "qemu:///system"

// SystemSocket is the unix socket of the system libvirtd (libvirt's
// default, also used by go-libvirt's local dialer).
const SystemSocket = "/var/run/libvirt/libvirt-sock"

// endpoint is where to dial and what to ask libvirtd for once connected.
type endpoint struct {
	uri    string // the URI sent in REMOTE_PROC_CONNECT_OPEN
	socket string // unix socket path
	runDir string // directory holding NAME.pid files of running domains
}

// resolve turns a Config into an endpoint. Only local unix transports are
// supported: "qemu:///system", "qemu:///session", "qemu+unix:///system",
// optionally with "?socket=PATH"; an explicit Config.Socket wins over both.
//
// Socket locations follow libvirt's remote driver (docs: "Connection
// URIs", https://libvirt.org/uri.html#unix-transport): the system daemon
// listens on /var/run/libvirt/libvirt-sock, a session daemon on
// $XDG_RUNTIME_DIR/libvirt/libvirt-sock (falling back to
// $HOME/.cache/libvirt/libvirt-sock when XDG_RUNTIME_DIR is unset).
func resolve(cfg Config) (endpoint, error) {
	raw := cfg.URI
	if raw == "" {
		raw = DefaultURI
	}
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, fmt.Errorf("libvirt URI %q: %w", raw, err)
	}
	driver, transport, _ := strings.Cut(u.Scheme, "+")
	if transport != "" && transport != "unix" {
		return endpoint{}, fmt.Errorf("libvirt URI %q: transport %q is not supported; use a local URI such as %s", raw, transport, DefaultURI)
	}
	if u.Host != "" {
		return endpoint{}, fmt.Errorf("libvirt URI %q: remote hosts are not supported; use a local URI such as %s", raw, DefaultURI)
	}
	if driver != "qemu" {
		return endpoint{}, fmt.Errorf("libvirt URI %q: driver %q is not supported; agentbox needs the qemu driver", raw, driver)
	}
	// What libvirtd is asked for drops the transport, as libvirt's
	// remote driver does: qemu+unix:///system opens qemu:///system.
	ep := endpoint{uri: (&url.URL{Scheme: driver, Path: u.Path}).String()}
	switch u.Path {
	case "/system":
		ep.socket = SystemSocket
		ep.runDir = "/run/libvirt/qemu"
	case "/session":
		rt := os.Getenv("XDG_RUNTIME_DIR")
		if rt != "" {
			ep.socket = filepath.Join(rt, "libvirt", "libvirt-sock")
			ep.runDir = filepath.Join(rt, "libvirt", "qemu", "run")
		} else {
			home, err := os.UserHomeDir()
			if err != nil {
				return endpoint{}, fmt.Errorf("libvirt URI %q: locate the session socket: %w", raw, err)
			}
			ep.socket = filepath.Join(home, ".cache", "libvirt", "libvirt-sock")
			ep.runDir = filepath.Join(home, ".cache", "libvirt", "qemu", "run")
		}
	default:
		return endpoint{}, fmt.Errorf("libvirt URI %q: path must be /system or /session", raw)
	}
	if s := u.Query().Get("socket"); s != "" {
		ep.socket = s
	}
	if cfg.Socket != "" {
		ep.socket = cfg.Socket
	}
	return ep, nil
}
