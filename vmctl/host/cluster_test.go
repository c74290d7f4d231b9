package host

import (
	"context"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/clusterproxy"
)

type noCluster struct{}

func (noCluster) Lookup(context.Context, string) (cluster.Entry, error) { return cluster.Entry{}, nil }
func (noCluster) List(context.Context) ([]cluster.Entry, error)         { return nil, nil }
func (noCluster) Node(context.Context, string) (cluster.NodeInfo, error) {
	return cluster.NodeInfo{}, nil
}
func (noCluster) Self() string { return "h1" }

// TestClusterRouterToken: a cluster token too short is refused naming
// its file; a long enough one makes the router.
func TestClusterRouterToken(t *testing.T) {
	pcfg := clusterproxy.Config{Directory: noCluster{}, Nodes: noCluster{}}
	short := Auth{ClusterToken: "abc\n", ClusterTokenFile: "/etc/short"}
	clusterPeerAuth(short, &pcfg, &cluster.Config{})
	if _, err := clusterRouter(pcfg, short); err == nil || !strings.HasPrefix(err.Error(), "--cluster-token-file /etc/short: the cluster token is 3 bytes long") {
		t.Errorf("short token: %v", err)
	}
	good := Auth{ClusterToken: "0123456789abcdef0123456789abcdef\n", ClusterTokenFile: "/etc/good"}
	clusterPeerAuth(good, &pcfg, &cluster.Config{})
	p, err := clusterRouter(pcfg, good)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}

// TestClusterTransport: an http:// advertise URL with a cluster token is
// refused unless the network is trusted; https:// always passes.
func TestClusterTransport(t *testing.T) {
	a := Auth{ClusterToken: "0123456789abcdef0123456789abcdef"}
	for _, c := range []struct {
		advertise string
		trusted   bool
		ok        bool
	}{
		{"http://h1:7070", false, false},
		{"http://h1:7070", true, true},
		{"https://h1:7070", false, true},
	} {
		err := checkClusterTransport(a, &ClusterOptions{Config: &cluster.Config{Advertise: c.advertise}, TrustedNetwork: c.trusted})
		if c.ok != (err == nil) {
			t.Errorf("%s trusted=%v: %v", c.advertise, c.trusted, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--advertise http://h1:7070 is http://: the other nodes would send it the cluster token and the creates' secrets in clear; advertise https://") || err != nil && !strings.Contains(err.Error(), "--cluster-trusted-network") {
			t.Errorf("refusal: %v", err)
		}
	}
	sc, err := clusterSecretsClient(a, &ClusterOptions{Config: &cluster.Config{}}, "h1")
	if err != nil {
		t.Fatal(err)
	}
	sc.Close()
}

// TestRedactedServers: credentials in NATS URLs never reach the log.
func TestRedactedServers(t *testing.T) {
	got := redactedServers([]string{"nats://s3cret@n1:4222", "nats://u:pw@n2:4222", "nats://n3:4222"})
	if want := "nats://redacted@n1:4222,nats://redacted@n2:4222,nats://n3:4222"; got != want {
		t.Errorf("redacted %q, want %q", got, want)
	}
}
