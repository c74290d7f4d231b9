package network

import (
	"errors"
	"fmt"
	"math"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
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
	// Outbound is nil when the guest's traffic (the tap's ingress) is
	// policed, else why not.
	Outbound error
}

// LimitTap caps the traffic of the host tap at bytesPerSec in each
// direction, with the kernel's traffic control set through netlink (no
// tc binary), before the domain opens the tap:
//
//   - to the guest (the tap's egress): an htb root qdisc whose default
//     class 1:1 has rate and ceiling bytesPerSec and a burst of
//     RateBurst: packets queue and leave at the rate (TCP sees the
//     delay and paces itself), as libvirt's <bandwidth><inbound> does;
//   - from the guest (the tap's ingress): an ingress qdisc with a u32
//     match-all filter and a police action dropping what exceeds the
//     rate and burst, as libvirt's <bandwidth><outbound> does. A kernel
//     without the police action (act_police) or u32 leaves this
//     direction uncapped: TapLimit.Outbound says why.
//
// Why not libvirt's <bandwidth>: libvirt does apply it to a tap it did not
// make (type='ethernet', managed='no'), but by running the tc binary with
// an sfq leaf under htb, and fails the domain's start on kernels without
// sch_sfq (seen: "Specified qdisc kind is unknown"); here only what the
// cap needs is asked of the kernel, and each direction is reported as it
// is. The qdiscs live and die with the tap. Errors: the tap is missing,
// or htb is refused (nothing of the cap is left then).
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
	lim.Outbound = policeIngress(idx, bytesPerSec, lim.Burst)
	return lim, nil
}

// policeIngress polices the traffic entering the host from the tap with
// link index idx; on failure it removes what it added and says why.
func policeIngress(idx int, bytesPerSec, burst uint64) error {
	ingress := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS}}
	if err := netlink.QdiscReplace(ingress); err != nil {
		return fmt.Errorf("the kernel refused an ingress qdisc: %w", err)
	}
	police := netlink.NewPoliceAction()
	police.Rate, police.Burst, police.Mtu = uint32(bytesPerSec), uint32(burst), 64<<10
	police.ExceedAction, police.NotExceedAction = netlink.TC_POLICE_SHOT, netlink.TC_POLICE_OK
	filter := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.MakeHandle(0xffff, 0), Priority: 1, Protocol: unix.ETH_P_ALL},
		Sel:         &netlink.TcU32Sel{Flags: netlink.TC_U32_TERMINAL, Nkeys: 1, Keys: []netlink.TcU32Key{{Mask: 0, Val: 0}}},
		Police:      police,
	}
	if err := netlink.FilterAdd(filter); err != nil {
		return errors.Join(fmt.Errorf("the kernel has no tc policing (u32 filter with a police action) for the tap's ingress: %w", err), netlink.QdiscDel(ingress))
	}
	return nil
}
