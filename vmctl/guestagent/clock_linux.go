package guestagent

import (
	"time"

	"golang.org/x/sys/unix"
)

// setRealtimeClock sets CLOCK_REALTIME to t (needs CAP_SYS_TIME).
func setRealtimeClock(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
}
