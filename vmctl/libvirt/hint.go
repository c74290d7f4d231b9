package libvirt

import "fmt"

// ConnectError wraps an error of [Connect] to uri for the people who run
// agentbox: it names the URI and says how to start libvirtd. The error
// stays in the chain (errors.Is finds [ErrUnavailable]).
func ConnectError(uri string, err error) error {
	return fmt.Errorf("connect to libvirt at %s: %w (is libvirtd running? start it with `libvirtd -d` or `systemctl start libvirtd`)", uri, err)
}
