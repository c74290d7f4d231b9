package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

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

// TestClusterRouterFlags: the cluster token file is required, must be
// long enough, and a bad --cluster-ca is named.
func TestClusterRouterFlags(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	good := filepath.Join(dir, "good")
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	os.WriteFile(good, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(notPEM, []byte("nope"), 0o600)
	for _, tc := range []struct {
		args []string
		want string // error prefix; "" for none
	}{
		{nil, "--cluster needs --cluster-token-file"},
		{[]string{"--cluster-token-file", filepath.Join(dir, "missing")}, "--cluster-token-file: open "},
		{[]string{"--cluster-token-file", short}, "--cluster-token-file " + short + ": the cluster token is 3 bytes long"},
		{[]string{"--cluster-token-file", good, "--cluster-ca", notPEM}, "--cluster-ca " + notPEM + ": no PEM certificate in it"},
		{[]string{"--cluster-token-file", good}, ""},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		for _, f := range serveClusterProxyFlags() {
			f.Apply(fs)
		}
		for _, n := range []string{"tls-client-ca", "tls-cert", "tls-key"} {
			fs.String(n, "", "")
		}
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		p, _, err := clusterRouter(cli.NewContext(cli.NewApp(), fs, nil), noCluster{}, noCluster{}, clusterproxy.Config{}, nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%v: err = %v, want %q...", tc.args, err, tc.want)
		}
		if p != nil {
			p.Close()
		}
	}
}
