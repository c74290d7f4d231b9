package nix

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/network"
)

// fwRules is what nixos-modules/host/firewall-rules.nix evaluates to.
type fwRules struct {
	TapPrefix       string `json:"tapPrefix"`
	Pool            string `json:"pool"`
	NftablesInput   string `json:"nftablesInput"`
	NftablesForward string `json:"nftablesForward"`
	Iptables        string `json:"iptables"`
}

// evalFirewallRules evaluates the host module's firewall rules with
// nix-instantiate (builtins only) for args, a Nix attribute set.
func evalFirewallRules(t *testing.T, args string) fwRules {
	t.Helper()
	if _, err := exec.LookPath("nix-instantiate"); err != nil {
		testenv.SkipOrFail(t, "nix-instantiate not found: run tests/host-setup.sh (installs nix-bin)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"--eval", "--strict", "--json"}
	if os.Geteuid() == 0 {
		argv = append(argv, "--option", "build-users-group", "") // Debian's nix-bin as root
	}
	argv = append(argv, "-E", fmt.Sprintf("import %s/nixos-modules/host/firewall-rules.nix %s", root, args))
	out, err := exec.Command("nix-instantiate", argv...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("nix-instantiate: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var r fwRules
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("nix-instantiate output %q: %v", out, err)
	}
	return r
}

// TestFirewallRulesMatchDaemon: the module's defaults are the daemon's tap
// name prefix and default pool, and a pool setting reaches every rule.
func TestFirewallRulesMatchDaemon(t *testing.T) {
	r := evalFirewallRules(t, "{ }")
	if r.TapPrefix != network.TapPrefix {
		t.Errorf("tapPrefix %q, vmctl/network.TapPrefix %q", r.TapPrefix, network.TapPrefix)
	}
	if r.Pool != network.DefaultPool.String() {
		t.Errorf("pool %q, vmctl/network.DefaultPool %q", r.Pool, network.DefaultPool)
	}
	r = evalFirewallRules(t, `{ pool = "10.99.0.0/20"; }`)
	for name, text := range map[string]string{"nftablesInput": r.NftablesInput, "nftablesForward": r.NftablesForward, "iptables": r.Iptables} {
		if strings.Contains(text, network.DefaultPool.String()) || !strings.Contains(text, "10.99.0.0/20") {
			t.Errorf("%s does not use the pool 10.99.0.0/20:\n%s", name, text)
		}
	}
}

// nixosFwNftables is the nixos-fw table of nixpkgs'
// nixos/modules/services/networking/firewall-nftables.nix as it renders
// with the defaults (trusted lo, reverse path filter, TCP 22 open as
// openssh does) and filterForward on; %s are extraInputRules and
// extraForwardRules.
const nixosFwNftables = `table inet nixos-fw {
  chain rpfilter {
    type filter hook prerouting priority mangle + 10; policy drop;
    meta nfproto ipv4 udp sport . udp dport { 67 . 68, 68 . 67 } accept comment "DHCPv4 client/server"
    fib saddr . mark . iif oif exists accept
  }
  chain input {
    type filter hook input priority filter; policy drop;
    iifname { "lo" } accept comment "trusted interfaces"
    ct state vmap {
      invalid : drop,
      established : accept,
      related : accept,
      new : jump input-allow,
      untracked: jump input-allow,
    }
  }
  chain input-allow {
    tcp dport { 22 } accept
    icmp type echo-request accept comment "allow ping"
    %s
  }
  chain forward {
    type filter hook forward priority filter; policy drop;
    ct state vmap {
      invalid : drop,
      established : accept,
      related : accept,
      new : jump forward-allow,
      untracked : jump forward-allow,
    }
  }
  chain forward-allow {
    ct status dnat accept comment "allow port forward"
    %s
  }
}
`

// nixosFwIptables is the core of firewall-start of nixpkgs'
// nixos/modules/services/networking/firewall-iptables.nix (IPv4, drop,
// no logging, TCP 22 open); %s is extraCommands, run where firewall-start
// runs them: before the final refuse rule.
const nixosFwIptables = `set -e
iptables -w -N nixos-fw-accept
iptables -w -A nixos-fw-accept -j ACCEPT
iptables -w -N nixos-fw-refuse
iptables -w -A nixos-fw-refuse -j DROP
iptables -w -N nixos-fw-log-refuse
iptables -w -A nixos-fw-log-refuse -j nixos-fw-refuse
iptables -w -N nixos-fw
iptables -w -A nixos-fw -i lo -j nixos-fw-accept
iptables -w -A nixos-fw -m conntrack --ctstate ESTABLISHED,RELATED -j nixos-fw-accept
iptables -w -A nixos-fw -p tcp --dport 22 -j nixos-fw-accept
iptables -w -A nixos-fw -p icmp --icmp-type echo-request -j nixos-fw-accept
%s
iptables -w -A nixos-fw -j nixos-fw-log-refuse
iptables -w -A INPUT -j nixos-fw
`

// TestFirewallRulesLetGuestsReachEgress loads NixOS's firewall, as each
// backend renders it, with and without the module's rules into a network
// namespace that stands for the host, with a "tap" (a veth named like one,
// abx + 12 hex digits) and a second interface, and sends from the other
// end, a namespace standing for the guest, to listeners on the host side.
// With the rules the guest reaches UDP 53 and any TCP port on the tap's
// host address and nothing else; without them NixOS's firewall drops its
// DNS and proxy traffic (the review's finding); through the other
// interface nothing gets in either way.
func TestFirewallRulesLetGuestsReachEgress(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "the firewall test needs root (network namespaces, nftables, iptables)")
	}
	for _, tool := range []string{"ip", "nft", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.SkipOrFail(t, "%s not found: run tests/host-setup.sh", tool)
		}
	}
	r := evalFirewallRules(t, "{ }")
	type want struct{ dns, proxy, forwarder, otherUDP, otherIf bool }
	cases := []struct {
		name, backend string
		rules         bool
		want          want
	}{
		{"nftables", "nftables", true, want{dns: true, proxy: true, forwarder: true}},
		{"nftables-without-rules", "nftables", false, want{}},
		{"iptables", "iptables", true, want{dns: true, proxy: true, forwarder: true}},
		{"iptables-without-rules", "iptables", false, want{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			host, guest := vethPair(t)
			switch tc.backend {
			case "nftables":
				in, fwd := "", ""
				if tc.rules {
					in, fwd = r.NftablesInput, r.NftablesForward
				}
				runIn(t, host, strings.NewReader(fmt.Sprintf(nixosFwNftables, in, fwd)), "nft", "-f", "-")
			case "iptables":
				extra := ""
				if tc.rules {
					extra = r.Iptables
				}
				runIn(t, host, strings.NewReader(fmt.Sprintf(nixosFwIptables, extra)), "sh", "-s")
			}
			listenUDP(t, host, "10.213.0.1:53")
			listenUDP(t, host, "10.213.0.1:5353")
			listenUDP(t, host, "192.168.77.1:53")
			listenTCP(t, host, "10.213.0.1:443")
			listenTCP(t, host, "10.213.0.1:8080")
			listenTCP(t, host, "192.168.77.1:443")
			got := want{
				dns:       udpAnswers(t, guest, "10.213.0.1:53"),
				proxy:     tcpConnects(t, guest, "10.213.0.1:443"),
				forwarder: tcpConnects(t, guest, "10.213.0.1:8080"),
				otherUDP:  udpAnswers(t, guest, "10.213.0.1:5353"),
				otherIf:   udpAnswers(t, guest, "192.168.77.1:53") || tcpConnects(t, guest, "192.168.77.1:443"),
			}
			if got != tc.want {
				t.Errorf("reached (DNS on the tap, TCP 443, TCP 8080, UDP 5353, the other interface) = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// vethPair makes two network namespaces, removed at the end: host, with
// abx0123456789ab (10.213.0.1/30) and other0 (192.168.77.1/30), and guest
// with their peers (10.213.0.2/30, 192.168.77.2/30).
func vethPair(t *testing.T) (host, guest string) {
	t.Helper()
	host = fmt.Sprintf("abxfwh%d", os.Getpid())
	guest = fmt.Sprintf("abxfwg%d", os.Getpid())
	for _, ns := range []string{host, guest} {
		runStdin(t, nil, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		runIn(t, ns, nil, "ip", "link", "set", "lo", "up")
	}
	tap := network.TapPrefix + "0123456789ab"
	for _, l := range []struct{ host, guest, hostAddr, guestAddr string }{
		{tap, "g0", "10.213.0.1/30", "10.213.0.2/30"},
		{"other0", "g1", "192.168.77.1/30", "192.168.77.2/30"},
	} {
		runIn(t, host, nil, "ip", "link", "add", l.host, "type", "veth", "peer", "name", l.guest, "netns", guest)
		runIn(t, host, nil, "ip", "addr", "add", l.hostAddr, "dev", l.host)
		runIn(t, host, nil, "ip", "link", "set", l.host, "up")
		runIn(t, guest, nil, "ip", "addr", "add", l.guestAddr, "dev", l.guest)
		runIn(t, guest, nil, "ip", "link", "set", l.guest, "up")
	}
	return host, guest
}

// runStdin runs a command with stdin (nil: none); it fails the test on
// error, with the command's output.
func runStdin(t *testing.T, stdin *strings.Reader, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// runIn runs a command in the named network namespace.
func runIn(t *testing.T, ns string, stdin *strings.Reader, name string, args ...string) {
	t.Helper()
	runStdin(t, stdin, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// inNS runs fn on a thread in the named network namespace; sockets made
// there stay in it.
func inNS(t *testing.T, name string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var h netns.NsHandle
		if h, err = netns.GetFromName(name); err != nil {
			return
		}
		defer h.Close()
		if err = netns.Set(h); err != nil {
			return
		}
		fn()
	}()
	<-done
	if err != nil {
		t.Fatalf("network namespace %s: %v", name, err)
	}
}

// listenUDP echoes datagrams on addr in namespace ns until the test ends.
func listenUDP(t *testing.T, ns, addr string) {
	t.Helper()
	var c net.PacketConn
	var err error
	inNS(t, ns, func() { c, err = net.ListenPacket("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(buf[:n], from)
		}
	}()
}

// listenTCP accepts (and closes) connections on addr in namespace ns until
// the test ends.
func listenTCP(t *testing.T, ns, addr string) {
	t.Helper()
	var l net.Listener
	var err error
	inNS(t, ns, func() { l, err = net.Listen("tcp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// blockedAfter is how long a packet's answer is waited for: the
// namespaces are on one host, so an answer comes in microseconds and a
// drop is the only reason for none.
const blockedAfter = 500 * time.Millisecond

// udpAnswers reports whether a datagram from namespace ns to addr is echoed.
func udpAnswers(t *testing.T, ns, addr string) bool {
	t.Helper()
	var c net.Conn
	var err error
	inNS(t, ns, func() { c, err = net.Dial("udp4", addr) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("agentbox")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(blockedAfter))
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	return err == nil && string(buf[:n]) == "agentbox"
}

// tcpConnects reports whether a TCP connection from namespace ns to addr
// is accepted.
func tcpConnects(t *testing.T, ns, addr string) bool {
	t.Helper()
	var c net.Conn
	var err error
	inNS(t, ns, func() { c, err = net.DialTimeout("tcp4", addr, blockedAfter) })
	if err != nil {
		return false
	}
	c.Close()
	return true
}
