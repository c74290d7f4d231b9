package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestClusterPeersFlags: the cluster token file is required and read,
// and a bad --cluster-ca is named (vmctl/host's TestClusterRouterToken:
// the token must be long enough).
func TestClusterPeersFlags(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(good, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(notPEM, []byte("nope"), 0o600)
	for _, tc := range []struct {
		args []string
		want string // error prefix; "" for none
	}{
		{nil, "--cluster needs --cluster-token-file"},
		{[]string{"--cluster-token-file", filepath.Join(dir, "missing")}, "--cluster-token-file: open "},
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
		tok, file, _, err := clusterPeers(cli.NewContext(cli.NewApp(), fs, nil))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%v: err = %v, want %q...", tc.args, err, tc.want)
		}
		if err == nil && (file != good || tok != "0123456789abcdef0123456789abcdef\n") {
			t.Errorf("%v: token %q from %q", tc.args, tok, file)
		}
	}
}
