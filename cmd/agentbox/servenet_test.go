package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/network"
)

// TestServeNetworkCleanup: `serve --network-cleanup` refuses while a
// daemon answers on --socket, otherwise removes the table's taps and then
// the table, and says so; a second run finds nothing.
func TestServeNetworkCleanup(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "serve --network-cleanup needs root (taps, nftables)")
	}
	table := fmt.Sprintf("abxcli%d", os.Getpid())
	serve := func(sock string) result {
		t.Helper()
		var stdout, stderr bytes.Buffer
		app := newApp()
		app.Writer, app.ErrWriter = &stdout, &stderr
		dir := t.TempDir()
		config := filepath.Join(dir, "config.toml")
		if err := os.WriteFile(config, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		err := app.Run([]string{"agentbox", "--config", config, "--socket", sock, "--state-dir", filepath.Join(dir, "state"),
			"serve", "--network-cleanup", "--network-table", table})
		code := exitCode(err, &stderr)
		return result{stdout.String(), stderr.String(), code}
	}

	m, err := network.New(network.Config{Pool: netip.MustParsePrefix("10.213.252.0/30"), Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Destroy(context.Background()) })
	const id = "ccccccccccc1"
	if _, err := m.Setup(context.Background(), id, netpolicy.Policy{Mode: netpolicy.ModeOpen}, 0); err != nil {
		t.Fatal(err)
	}

	d := startDaemon(t)
	if r := serve(d.sock); r.code == 0 || !strings.Contains(r.stderr, "another agentbox serve is listening on "+d.sock) {
		t.Fatalf("cleanup with a daemon on the socket: %+v", r)
	}
	if _, err := netlink.LinkByName("abx" + id); err != nil {
		t.Fatalf("the refused cleanup removed the tap: %v", err)
	}

	sock := filepath.Join(testenv.ShortTempDir(t), "s")
	serve(sock).check(t, 0, "removed tap abx"+id+"\nremoved table inet "+table+"\n", "")
	if _, err := netlink.LinkByName("abx" + id); err == nil {
		t.Error("the tap is left")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the cleanup left its socket: %v", err)
	}
	serve(sock).check(t, 0, "nothing to remove: no table inet "+table+" and no taps of it\n", "")
}
