package domain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenIDAndNetCapGolden: <genid/> without a value (libvirt makes a new
// GUID per start) and a network cap as <bandwidth> on the interface, in
// kilobytes of 1000 bytes rounded up.
func TestGenIDAndNetCapGolden(t *testing.T) {
	s := validSpec()
	s.GenID = true
	s.Interface = &Interface{Tap: "abx0123456789ab", MAC: "02:ab:01:23:45:67"}
	s.Tune.NetBytesPerSec = 2 << 20 // 2097152 B/s: 2098 kB/s; burst a tenth: 209716 B → 210 kB
	got, err := XML(s)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "genid-netcap.xml")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("XML differs from %s (run with -update to accept):\n%s", path, got)
	}
	for _, frag := range []string{"<genid></genid>", `<inbound average="2098" burst="210"></inbound>`, `<outbound average="2098" burst="210"></outbound>`} {
		if !strings.Contains(got, frag) {
			t.Errorf("XML lacks %s", frag)
		}
	}
}

func TestNetBurst(t *testing.T) {
	for _, tc := range []struct {
		t    Tune
		want uint64
	}{
		{Tune{NetBytesPerSec: 10 << 20}, 1 << 20},
		{Tune{NetBytesPerSec: 100 << 10}, MinNetBurstBytes},
		{Tune{NetBytesPerSec: 10 << 20, NetBurstBytes: 4 << 20}, 4 << 20},
		{Tune{NetBytesPerSec: 10 << 20, NetBurstBytes: 1}, MinNetBurstBytes},
	} {
		if got := tc.t.NetBurst(); got != tc.want {
			t.Errorf("%+v: NetBurst = %d, want %d", tc.t, got, tc.want)
		}
	}
}

func TestNetCapNeedsInterface(t *testing.T) {
	s := validSpec()
	s.Tune.NetBytesPerSec = 1 << 20
	err := s.Validate()
	if err == nil || !strings.Contains(err.Error(), "Tune.NetBytesPerSec") {
		t.Fatalf("Validate = %v, want an error naming Tune.NetBytesPerSec", err)
	}
}
