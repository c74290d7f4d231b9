package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/cluster"
)

// serveClusterFlags are serve's flags for joining a cluster on NATS
// JetStream (docs/cluster.md).
func serveClusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "cluster", Usage: "join the cluster whose NATS servers (with JetStream) are at `URLS` (nats://n1:4222,nats://n2:4222): creates go through the cluster's queue to a node with room; see docs/cluster.md"},
		&cli.StringFlag{Name: "node", Usage: "this node's `NAME` in the cluster (needs --cluster)"},
		&cli.StringFlag{Name: "advertise", Usage: "the `URL` other nodes and clients reach this node's API at, e.g. https://h1:7070 (needs --cluster)"},
		&cli.StringFlag{Name: "nats-token-file", Usage: "authenticate to NATS with the token in `FILE` (its authorization { token }; needs --cluster)"},
		&cli.StringFlag{Name: "nats-creds", Usage: "authenticate to NATS with the credentials `FILE` (a user JWT and nkey seed; needs --cluster)"},
		&cli.StringFlag{Name: "nats-nkey", Usage: "authenticate to NATS with the user nkey seed in `FILE` (needs --cluster)"},
		&cli.StringFlag{Name: "nats-cert", Usage: "TLS client certificate `FILE` (PEM) presented to NATS, with --nats-key (a server with tls { verify: true } authenticates the node by it)"},
		&cli.StringFlag{Name: "nats-key", Usage: "the key `FILE` (PEM) of --nats-cert"},
		&cli.StringFlag{Name: "nats-ca", Usage: "CA `FILE` (PEM) of the NATS servers' TLS certificates (default: the system's roots)"},
		&cli.BoolFlag{Name: "cluster-trusted-network", Usage: "the network between the nodes is trusted: allow an http:// --advertise, over which the cluster token and creates' secrets cross in clear"},
		&cli.DurationFlag{Name: "queue-timeout", Value: cluster.DefaultQueueTimeout, Usage: "how long a cluster create waits in the queue for a node with room before 429 queue_timeout"},
	}
}

// serveClusterConfig checks serve's cluster flags (before anything is
// started) and returns the node's configuration without Local and
// Logger; nil without --cluster.
func serveClusterConfig(c *cli.Context) (*cluster.Config, error) {
	var servers []string
	for _, v := range c.StringSlice("cluster") {
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				servers = append(servers, u)
			}
		}
	}
	if len(servers) == 0 {
		for _, f := range []string{"node", "advertise", "nats-token-file", "nats-creds", "nats-nkey", "nats-cert", "nats-key", "nats-ca", "cluster-token-file", "cluster-ca", "cluster-trusted-network"} {
			if c.IsSet(f) {
				return nil, fmt.Errorf("--%s needs --cluster nats://HOST:4222: a node name and address only mean something in a cluster", f)
			}
		}
		return nil, nil
	}
	if c.String("node") == "" || c.String("advertise") == "" {
		return nil, fmt.Errorf("--cluster needs --node NAME (this node's name) and --advertise URL (where the other nodes and clients reach its API)")
	}
	if !api.ValidName(c.String("node")) {
		return nil, fmt.Errorf("--node %q: use 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit (not 12 hex digits)", c.String("node"))
	}
	u, err := url.Parse(c.String("advertise"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--advertise %q: give the URL of this node's TCP API, e.g. https://h1:7070", c.String("advertise"))
	}
	if c.String("cluster-token-file") == "" {
		return nil, fmt.Errorf("--cluster needs --cluster-token-file: the nodes forward requests to each other with its token (give every node the same file, e.g. made with `openssl rand -hex 32`)")
	}
	if u.Scheme == "http" && !c.Bool("cluster-trusted-network") {
		return nil, fmt.Errorf("--advertise %s is http://: the other nodes would send it the cluster token and the creates' secrets in clear; advertise https:// (--tls-cert, --tls-key, and --cluster-ca on every node), or say the network between the nodes is trusted with --cluster-trusted-network", c.String("advertise"))
	}
	if c.Duration("queue-timeout") <= 0 {
		return nil, fmt.Errorf("--queue-timeout %s: must be positive", c.Duration("queue-timeout"))
	}
	token := ""
	if f := c.String("nats-token-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--nats-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	cfg := &cluster.Config{
		Servers: servers, Token: token, Node: c.String("node"), Advertise: c.String("advertise"),
		Version: version, QueueTimeout: c.Duration("queue-timeout"),
		CredsFile: c.String("nats-creds"), NKeyFile: c.String("nats-nkey"),
	}
	if cfg.TLS, err = natsTLS(c); err != nil {
		return nil, err
	}
	if err := cluster.CheckNATSAuth(*cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// natsTLS is the TLS config of the connection to NATS from --nats-ca,
// --nats-cert and --nats-key; nil without them.
func natsTLS(c *cli.Context) (*tls.Config, error) {
	ca, cert, key := c.String("nats-ca"), c.String("nats-cert"), c.String("nats-key")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--nats-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--nats-ca %s: no PEM certificate in it", ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("--nats-cert and --nats-key go together: give both")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--nats-cert/--nats-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
