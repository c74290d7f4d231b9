package network

import (
	"errors"
	"fmt"
	"math"

	"github.com/vishvananda/netlink"
)

// MinRateBytes is the least burst of a network cap, in bytes, and so the
// lowest rate worth asking for (per second): a burst below one maximum-size
// frame (64 KiB with the tap's offloads) lets nothing through.
const MinRateBytes = 64 << 10

// RateBurst is the burst, in bytes, of a network cap of bytesPerSec:
// a tenth of a second's worth, at least MinRateBytes.
func RateBurst(bytesPerSec uint64) uint64 { return max(bytesPerSec/10, MinRateBytes) }

// TapLimit says how a network cap is in force on a tap (LimitTap).
type TapLimit struct {
	// Burst is the burst in bytes (RateBurst).
	Burst uint64
}

// LimitTap caps the traffic TO the guest of the host tap (the tap's
// egress) at bytesPerSec, with the kernel's traffic control set through
// netlink (no tc binary), once the domain has opened the tap: an htb
// root qdisc whose default class 1:1 has rate and ceiling bytesPerSec and
// a burst of RateBurst: packets queue and leave at the rate (TCP sees the
// delay and paces itself), as libvirt's <bandwidth><inbound> does.
//
// The traffic FROM the guest is capped by the sandbox's firewall rules
// instead (OutLimit, Manager.Setup): an nftables limit object on the input
// and forward paths, which needs only nf_tables (a tc ingress policer
// needs act_police, which some kernels lack, the build host's among them;
// an ifb redirect with htb needs act_mirred and one more device per
// sandbox).
//
// Why not libvirt's <bandwidth>: libvirt does apply it to a tap it did not
// make (type='ethernet', managed='no'), but by running the tc binary with
// an sfq leaf under htb, and fails the domain's start on kernels without
// sch_sfq (seen: "Specified qdisc kind is unknown"); here only what the
// cap needs is asked of the kernel. The qdisc lives and dies with the
// tap. Errors: a rate out of range, the tap is missing, or htb is refused
// (nothing of the cap is left then).
func LimitTap(tap string, bytesPerSec uint64) (TapLimit, error) {
	lim := TapLimit{Burst: RateBurst(bytesPerSec)}
	if bytesPerSec < MinRateBytes || bytesPerSec > math.MaxUint32 {
		return lim, fmt.Errorf("network cap %d bytes/s: want %d to %d", bytesPerSec, MinRateBytes, uint64(math.MaxUint32))
	}
	link, err := netlink.LinkByName(tap)
	if err != nil {
		return lim, fmt.Errorf("network cap on tap %s: %w", tap, err)
	}
	idx := link.Attrs().Index
	htb := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT})
	htb.Defcls = 1
	if err := netlink.QdiscReplace(htb); err != nil {
		return lim, fmt.Errorf("network cap on tap %s: htb qdisc: %w", tap, err)
	}
	class := netlink.NewHtbClass(
		netlink.ClassAttrs{LinkIndex: idx, Parent: netlink.MakeHandle(1, 0), Handle: netlink.MakeHandle(1, 1)},
		netlink.HtbClassAttrs{Rate: 8 * bytesPerSec, Ceil: 8 * bytesPerSec, Buffer: uint32(lim.Burst), Cbuffer: uint32(lim.Burst)})
	if err := netlink.ClassReplace(class); err != nil {
		return lim, errors.Join(fmt.Errorf("network cap on tap %s: htb class: %w", tap, err), netlink.QdiscDel(htb))
	}
	return lim, nil
}
