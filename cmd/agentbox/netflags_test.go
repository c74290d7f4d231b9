package main

import (
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
)

// TestCLINetworkFlags: --network and --allow reach the create request;
// an allowlist without --allow is sent as is with a note on stderr; bad
// DESTs are refused before any request with what to write instead.
func TestCLINetworkFlags(t *testing.T) {
	d := startDaemon(t)
	img := t.TempDir()
	const note = "agentbox: note: --network allowlist without --allow: the sandbox can resolve and reach nothing\n"
	d.cli(t, nil, "create", "--image", img, "--network", "allowlist").check(t, 0, "000000abc001\n", note)
	d.cli(t, nil, "create", "--image", img, "--network", "allowlist", "--allow", "files.test").check(t, 0, "000000abc002\n", "")
	d.cli(t, nil, "create", "--image", img, "--network", "open").check(t, 0, "000000abc003\n", "")
	d.cli(t, nil, "create", "--image", img).check(t, 0, "000000abc004\n", "")
	want := []*api.NetworkPolicy{{Mode: "allowlist"}, {Mode: "allowlist", Allow: []string{"files.test"}}, {Mode: "open"}, nil}
	if len(d.mem.Creates()) != len(want) {
		t.Fatalf("%d create requests, want %d", len(d.mem.Creates()), len(want))
	}
	for i, w := range want {
		if got := d.mem.Creates()[i].Network; !equalJSON(got, w) {
			t.Errorf("create %d: network %+v, want %+v", i+1, got, w)
		}
	}

	for _, c := range []struct{ allow, stderr string }{
		{"http://files.test/", "agentbox: invalid network policy: --allow \"http://files.test/\": give a host name, not a URL: --allow files.test (or files.test:PORT)\n"},
		{"127.0.0.1:18089", "agentbox: invalid network policy: --allow \"127.0.0.1:18089\": the host's loopback is reached with host:PORT (as host.agentbox.internal:PORT): --allow host:18089\n"},
	} {
		d.cli(t, nil, "create", "--image", img, "--network", "allowlist", "--allow", c.allow).check(t, 125, "", c.stderr)
	}
	if len(d.mem.Creates()) != len(want) {
		t.Errorf("a refused --allow sent a create request")
	}
}

// TestCLIDNSFlag: --dns strict reaches the create request as "dns":
// "strict"; with a wildcard or without allowlist it is refused before any
// request, saying why.
func TestCLIDNSFlag(t *testing.T) {
	d := startDaemon(t)
	img := t.TempDir()
	d.cli(t, nil, "create", "--image", img, "--network", "allowlist", "--allow", "files.test", "--dns", "strict").check(t, 0, "000000abc001\n", "")
	if cs := d.mem.Creates(); len(cs) != 1 || !equalJSON(cs[0].Network, &api.NetworkPolicy{Mode: "allowlist", Allow: []string{"files.test"}, DNS: "strict"}) {
		t.Fatalf("create requests %+v", cs)
	}
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--network", "allowlist", "--allow", "*.files.test", "--dns", "strict"}, "agentbox: invalid network policy: --allow *.files.test: dns strict resolves only names the policy lists, and any name below a wildcard is the guest's choice: list each name (e.g. --allow www.files.test), or leave dns strict out\n"},
		{[]string{"--network", "open", "--dns", "strict"}, "agentbox: invalid network policy: dns strict needs --network allowlist: with open the guest can reach any DNS server itself\n"},
		{[]string{"--dns", "strict"}, "agentbox: invalid network policy: dns strict needs --network allowlist: mode none has no network\n"},
		{[]string{"--network", "allowlist", "--dns", "loose"}, "agentbox: invalid network policy: unknown dns mode \"loose\": use strict, or leave it out for the default\n"},
	} {
		d.cli(t, nil, append([]string{"create", "--image", img}, c.args...)...).check(t, 125, "", c.stderr)
	}
	if len(d.mem.Creates()) != 1 {
		t.Errorf("a refused --dns sent a create request")
	}
}
