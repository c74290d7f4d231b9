package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/cluster"
)

// fakeNodes are the fake daemon's cluster nodes, last seen 4 s before
// now.
func fakeNodes() []api.Node {
	seen := time.Now().Add(-4 * time.Second)
	return []api.Node{
		{Name: "h1", Advertise: "https://h1:7070", State: "up", Capacity: api.Capacity{VCPUs: 8, MemoryMiB: 16384, UsedVCPUs: 2, UsedMemoryMiB: 1024}, Sandboxes: 2, LastSeen: seen},
		{Name: "h2", Advertise: "https://h2:7070", State: "breaker-open", Reason: "creates failed repeatedly, pulling none until 2026-01-02T03:04:05Z: boot failed", Capacity: api.Capacity{VCPUs: 4, MemoryMiB: 8192}, LastSeen: seen},
	}
}

// listFakeNodes is the fake daemon's ListNodes (cliBackend).
func listFakeNodes(ctx context.Context) ([]api.Node, error) { return fakeNodes(), nil }

// drainFakeNode is the fake daemon's DrainNode (cliBackend).
func drainFakeNode(ctx context.Context, name string, drain bool) (api.Node, error) {
	for _, n := range fakeNodes() {
		if n.Name == name {
			if drain {
				n.State = "draining"
			}
			return n, nil
		}
	}
	return api.Node{}, api.Errorf(http.StatusNotFound, api.CodeNotFound, "node %q is not in the cluster (agentbox nodes lists them)", name)
}

func TestCLINodes(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "nodes").check(t, 0, ""+
		"NODE  STATE         CAPACITY         COMMITTED       SANDBOXES  LAST SEEN\n"+
		"h1    up            8 vCPU 16384MiB  2 vCPU 1024MiB  2          4s ago\n"+
		"h2    breaker-open  4 vCPU 8192MiB   0 vCPU 0MiB     0          4s ago\n"+
		"h2 breaker-open: creates failed repeatedly, pulling none until 2026-01-02T03:04:05Z: boot failed\n", "")
	d.cli(t, nil, "nodes", "-q").check(t, 0, "h1\nh2\n", "")
	r := d.cli(t, nil, "nodes", "--json")
	var list []api.Node
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 || list[1].State != "breaker-open" {
		t.Errorf("nodes --json: %q (%v)", r.stdout, err)
	}
	d.cli(t, nil, "node", "drain", "h1").check(t, 0, "h1 draining\n", "")
	d.cli(t, nil, "node", "undrain", "h1").check(t, 0, "h1 up\n", "")
	d.cli(t, nil, "node", "drain", "ghost").check(t, 125, "", "agentbox: node \"ghost\" is not in the cluster (agentbox nodes lists them)\n")
}

// TestServeClusterFlags: bad cluster flags are refused before anything
// starts, with what to do.
func TestServeClusterFlags(t *testing.T) {
	parse := func(args ...string) (*cluster.Config, error) {
		var got *cluster.Config
		var err error
		app := newApp()
		app.Writer, app.ErrWriter = &bytes.Buffer{}, &bytes.Buffer{}
		for _, cmd := range app.Commands {
			if cmd.Name == "serve" {
				cmd.Action = func(c *cli.Context) error {
					got, err = serveClusterConfig(c)
					return nil
				}
			}
		}
		if rerr := app.Run(append([]string{"agentbox", "serve"}, args...)); rerr != nil {
			t.Fatalf("run: %v", rerr)
		}
		return got, err
	}
	if cfg, err := parse(); cfg != nil || err != nil {
		t.Fatalf("no --cluster: %+v %v", cfg, err)
	}
	tok := filepath.Join(t.TempDir(), "nats.token")
	os.WriteFile(tok, []byte("s3cret\n"), 0o600)
	cfg, err := parse("--cluster", "nats://a:4222,nats://b:4222", "--cluster", "nats://c:4222", "--node", "h1", "--advertise", "https://h1:7070",
		"--cluster-token-file", tok, "--nats-token-file", tok, "--queue-timeout", "5s")
	if err != nil || len(cfg.Servers) != 3 || cfg.Servers[2] != "nats://c:4222" || cfg.Node != "h1" || cfg.QueueTimeout != 5*time.Second || cfg.Token != "s3cret" {
		t.Fatalf("cluster flags: %+v %v", cfg, err)
	}
	// NATS authenticated by its URL's user; http:// on a trusted network.
	cfg, err = parse("--cluster", "nats://u:p@a:4222", "--node", "h1", "--advertise", "http://h1:7070", "--cluster-token-file", tok, "--cluster-trusted-network")
	if err != nil || cfg.Servers[0] != "nats://u:p@a:4222" || cfg.Token != "" || cfg.TLS != nil {
		t.Fatalf("URL user, trusted network: %+v %v", cfg, err)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--node", "h1"}, "--node needs --cluster nats://HOST:4222: a node name and address only mean something in a cluster"},
		{[]string{"--nats-token-file", tok}, "--nats-token-file needs --cluster nats://HOST:4222: a node name and address only mean something in a cluster"},
		{[]string{"--cluster", "nats://a:4222", "--node", "h1"}, "--cluster needs --node NAME (this node's name) and --advertise URL (where the other nodes and clients reach its API)"},
		{[]string{"--cluster", "nats://a:4222", "--node", "-h", "--advertise", "https://h1:7070"}, `--node "-h": use 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit (not 12 hex digits)`},
		{[]string{"--cluster", "nats://a:4222", "--node", "h1", "--advertise", "h1:7070"}, `--advertise "h1:7070": give the URL of this node's TCP API, e.g. https://h1:7070`},
		{[]string{"--cluster", "nats://a:4222", "--node", "h1", "--advertise", "https://h1:7070"}, "--cluster needs --cluster-token-file: the nodes forward requests to each other with its token (give every node the same file, e.g. made with `openssl rand -hex 32`)"},
		{[]string{"--cluster", "nats://a:4222", "--node", "h1", "--advertise", "https://h1:7070", "--cluster-token-file", tok, "--queue-timeout", "0s"}, "--queue-timeout 0s: must be positive"},
		{[]string{"--cluster", "nats://a:4222", "--node", "h1", "--advertise", "https://h1:7070", "--cluster-token-file", tok, "--nats-token-file", tok + ".missing"}, "--nats-token-file: open " + tok + ".missing: no such file or directory"},
		{[]string{"--cluster", "nats://a:4222", "--node", "h1", "--advertise", "https://h1:7070", "--cluster-token-file", tok}, "cluster: NATS needs authentication, or anyone who reaches it could queue, drain and rewrite the cluster: require it in the nats-server's config (authorization { token } or users, nkeys, TLS verify) and give the node its credentials: --nats-token-file, --nats-creds, --nats-nkey, --nats-cert and --nats-key, or user:password@ in the --cluster URL"},
		{[]string{"--cluster", "nats://a:4222", "--node", "h1", "--advertise", "http://h1:7070", "--cluster-token-file", tok, "--nats-token-file", tok}, "--advertise http://h1:7070 is http://: the other nodes would send it the cluster token and the creates' secrets in clear; advertise https:// (--tls-cert, --tls-key, and --cluster-ca on every node), or say the network between the nodes is trusted with --cluster-trusted-network"},
		{[]string{"--cluster", "nats://a:4222", "--node", "h1", "--advertise", "https://h1:7070", "--cluster-token-file", tok, "--nats-cert", tok}, "--nats-cert and --nats-key go together: give both"},
		{[]string{"--cluster-trusted-network"}, "--cluster-trusted-network needs --cluster nats://HOST:4222: a node name and address only mean something in a cluster"},
	} {
		if _, err := parse(c.args...); err == nil || err.Error() != c.msg {
			t.Errorf("%q: %v, want %q", c.args, err, c.msg)
		}
	}
}
