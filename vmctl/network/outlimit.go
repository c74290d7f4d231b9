package network

import (
	"fmt"
	"math"
)

// OutLimit is the cap on the traffic FROM a sandbox's guest, enforced by
// the sandbox's own firewall rules (see Manager.Setup): one nftables
// named limit object of the table, "out-ID", of rate BytesPerSec and
// burst Burst, and a rule at the top of each of the sandbox's chains
// (in-ID: to this host, i.e. the egress resolver, proxy and host:PORT
// forwarders; fwd-ID: forwarded, open mode and CIDR rules) dropping what
// goes over it. Both paths draw from the one object, so the guest's
// traffic is capped as a whole whichever way it leaves. It is kept in the
// sandbox's Attachment, so a daemon that adopts the sandbox installs it
// again.
type OutLimit struct {
	// BytesPerSec is the average rate in bytes per second (at least
	// MinRateBytes).
	BytesPerSec uint64 `json:"bytes_per_sec"`
	// Burst is the limit object's burst in bytes (OutBurst). The kernel's
	// bucket holds one second of the rate plus the burst (nft_limit:
	// tokens_max = unit × (rate + burst) / rate, with a unit of one
	// second), and is full when the object is made.
	Burst uint64 `json:"burst"`
	// Table and Object name the nftables limit object: table inet
	// TABLE, limit OBJECT.
	Table  string `json:"table"`
	Object string `json:"object"`
	// NotEnforced says why the kernel refused the limit object (the
	// sandbox's other rules are in force, without the cap); empty when it
	// is in force.
	NotEnforced string `json:"not_enforced,omitempty"`
}

// Enforced reports whether the cap is in force.
func (l *OutLimit) Enforced() bool { return l != nil && l.NotEnforced == "" }

// Detail describes the mechanism for `inspect`.
func (l *OutLimit) Detail(tap string) string {
	return fmt.Sprintf("nftables limit %q of table inet %s (rate over %d bytes/second burst %d bytes, shared by the input and forward chains of tap %s): excess dropped",
		l.Object, l.Table, l.BytesPerSec, l.Burst, tap)
}

// OutBurst is the burst, in bytes, of the outbound cap of bytesPerSec: a
// tenth of a second's worth, at least MinRateBytes (as RateBurst). The
// kernel adds a second of the rate to it (see OutLimit.Burst): a
// policer's bucket must hold about a round trip's worth of TCP's window,
// or TCP loses far more than the excess and runs below the rate.
func OutBurst(bytesPerSec uint64) uint64 { return RateBurst(bytesPerSec) }

// outObject is the name of sandbox id's outbound limit object.
func outObject(id string) string { return "out-" + id }

// checkOutRate checks an outbound cap: 0 (none) or MinRateBytes to
// MaxUint32 bytes/s (the burst is a 32-bit field; rates above it are not
// worth a cap).
func checkOutRate(bytesPerSec uint64) error {
	if bytesPerSec != 0 && (bytesPerSec < MinRateBytes || bytesPerSec > math.MaxUint32) {
		return fmt.Errorf("outbound network cap %d bytes/s: want %d to %d", bytesPerSec, MinRateBytes, uint64(math.MaxUint32))
	}
	return nil
}
