package libvirt

import (
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
)

func tp(field string, v any) golibvirt.TypedParam {
	return golibvirt.TypedParam{Field: field, Value: golibvirt.TypedParamValue{I: v}}
}

// The fields are those `virsh domstats` printed for a paused TCG domain
// with one disk and one interface.
func TestParseStats(t *testing.T) {
	s := parseStats([]golibvirt.TypedParam{
		tp("state.state", int32(3)), tp("state.reason", int32(5)),
		tp("cpu.time", uint64(6832918000)), tp("cpu.user", uint64(5182792000)),
		tp("balloon.current", uint64(262144)), tp("balloon.rss", uint64(245316)),
		tp("net.count", uint32(1)), tp("net.0.name", "vnet0"),
		tp("net.0.rx.bytes", uint64(1000)), tp("net.0.rx.pkts", uint64(10)), tp("net.0.tx.bytes", uint64(2000)),
		tp("block.count", uint32(1)), tp("block.0.name", "vda"),
		tp("block.0.allocation", uint64(720896)), tp("block.0.capacity", uint64(3221225472)), tp("block.0.physical", uint64(663552)),
		tp("block.1.allocation", uint64(1)),
	})
	want := Stats{State: StatePaused, PauseReason: "ioerror", CPUTimeNs: 6832918000, RSSBytes: 245316 * 1024,
		DiskAllocationBytes: 720896, DiskPhysicalBytes: 663552, DiskCapacityBytes: 3221225472, NetRxBytes: 1000, NetTxBytes: 2000}
	if s != want {
		t.Errorf("parseStats =\n%+v, want\n%+v", s, want)
	}
	if s := parseStats([]golibvirt.TypedParam{tp("state.state", int32(1)), tp("state.reason", int32(1))}); s.State != StateRunning || s.PauseReason != "" {
		t.Errorf("running domain: %+v", s)
	}
}
