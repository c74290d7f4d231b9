package sandbox_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/network"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
)

// fakeNetwork hands out a tap, the MAC of network.MACFor, a /30 and the
// outbound cap asked for per sandbox, without touching the host.
type fakeNetwork struct {
	mu   sync.Mutex
	next int
	live map[string]network.Attachment
}

func (n *fakeNetwork) Setup(ctx context.Context, id string, p netpolicy.Policy, outBps uint64) (network.Attachment, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	mac, err := network.MACFor(id)
	if err != nil {
		return network.Attachment{}, err
	}
	n.next += 4
	base := netip.AddrFrom4([4]byte{10, 213, byte(n.next >> 8), byte(n.next)})
	att := network.Attachment{Tap: "abt" + id, MAC: mac, Host: base.Next(), Guest: base.Next().Next(), Bits: 30}
	if outBps > 0 {
		att.OutLimit = &network.OutLimit{BytesPerSec: outBps, Burst: network.OutBurst(outBps), Table: "fake", Object: "out-" + id}
	}
	if n.live == nil {
		n.live = map[string]network.Attachment{}
	}
	n.live[id] = att
	return att, nil
}

func (n *fakeNetwork) Adopt(ctx context.Context, id string, att network.Attachment, p netpolicy.Policy) error {
	return nil
}

func (n *fakeNetwork) Teardown(ctx context.Context, id string) error {
	n.mu.Lock()
	delete(n.live, id)
	n.mu.Unlock()
	return nil
}

func (n *fakeNetwork) Sweep(ctx context.Context, keep func(string) bool) ([]string, error) {
	return nil, nil
}

// TestRestoreKeepsGuestMAC: a restored sandbox has its own tap and
// addresses, but its domain, record and `inspect` carry the source's MAC —
// the one the guest NIC keeps in its saved device state — and so does a
// restore of a snapshot of the restored sandbox.
func TestRestoreKeepsGuestMAC(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	nw := &fakeNetwork{}
	f.mgr.SetNetwork(nw)
	open := netpolicy.Policy{Mode: netpolicy.ModeOpen}
	src, err := f.mgr.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, Name: "src", Network: open, BootTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srcAtt := *src.Record().Network.Attachment
	if _, err := f.snaps.Save(t0, src, "a", nil); err != nil {
		t.Fatal(err)
	}
	fork, err := f.snaps.Restore(t0, "a", snapshot.RestoreOptions{Image: f.img, Name: "fork"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(sb *sandbox.Sandbox) {
		t.Helper()
		att := sb.Record().Network.Attachment
		if att == nil || att.MAC != srcAtt.MAC || att.Tap == srcAtt.Tap || att.Guest == srcAtt.Guest {
			t.Fatalf("%s attachment %+v; want the source's MAC %s on its own tap and subnet (source %+v)", sb.Name, att, srcAtt.MAC, srcAtt)
		}
		d, err := fd.dom(sb.Domain)
		if err != nil {
			t.Fatal(err)
		}
		if d.spec.Interface == nil || d.spec.Interface.MAC != srcAtt.MAC || d.spec.Interface.Tap != att.Tap {
			t.Errorf("%s domain interface %+v; want MAC %s on tap %s", sb.Name, d.spec.Interface, srcAtt.MAC, att.Tap)
		}
		if want := att.Cmdline(); !containsWord(d.spec.Cmdline, want) {
			t.Errorf("%s kernel command line %q lacks %q", sb.Name, d.spec.Cmdline, want)
		}
		// The guest was told its own address (on whatever NIC it has).
		data, err := os.ReadFile(filepath.Join(fd.etc, sb.Domain, "network.set"))
		if err != nil {
			t.Fatal(err)
		}
		var req agentproto.NetworkRequest
		json.Unmarshal(data, &req)
		if want := netip.PrefixFrom(att.Guest, 30).String(); req.Address != want {
			t.Errorf("%s guest told %+v; want address %s", sb.Name, req, want)
		}
	}
	check(fork)
	// A snapshot of the fork passes the same MAC on.
	if _, err := f.snaps.Save(t0, fork, "b", nil); err != nil {
		t.Fatal(err)
	}
	fork2, err := f.snaps.Restore(t0, "b", snapshot.RestoreOptions{Image: f.img, Name: "fork2"})
	if err != nil {
		t.Fatal(err)
	}
	check(fork2)
	for _, sb := range []*sandbox.Sandbox{fork2, fork, src} {
		if err := f.mgr.Remove(t0, sb, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"a", "b"} {
		if err := f.snaps.Delete(t0, n); err != nil {
			t.Fatal(err)
		}
	}
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if len(nw.live) != 0 {
		t.Errorf("networks left: %v", nw.live)
	}
}

func containsWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}
