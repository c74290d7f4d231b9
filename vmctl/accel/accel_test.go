package accel

import (
	"errors"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	ok := func() error { return nil }
	broken := func() error { return errors.New("no /dev/kvm") }
	cases := []struct {
		mode    Mode
		probe   Prober
		want    string
		wantErr error
	}{
		{ModeTCG, broken, "qemu", nil},
		{ModeTCG, ok, "qemu", nil},
		{ModeAuto, ok, "kvm", nil},
		{ModeAuto, broken, "qemu", nil},
		{ModeKVM, ok, "kvm", nil},
		{ModeKVM, broken, "", ErrKVMUnusable},
	}
	for _, tc := range cases {
		c, err := Choose(tc.mode, tc.probe)
		if !errors.Is(err, tc.wantErr) || c.DomainType != tc.want {
			t.Errorf("Choose(%s) = %+v, %v; want %q, %v", tc.mode, c, err, tc.want, tc.wantErr)
		}
		if err == nil && c.Reason == "" {
			t.Errorf("Choose(%s) gave no reason", tc.mode)
		}
	}
	c, _ := Choose(ModeAuto, broken)
	if !strings.Contains(c.Reason, "no /dev/kvm") {
		t.Errorf("auto fallback reason %q does not carry the probe's reason", c.Reason)
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"auto", "kvm", "tcg", ""} {
		if _, err := ParseMode(s); err != nil {
			t.Errorf("ParseMode(%q): %v", s, err)
		}
	}
	if _, err := ParseMode("hvf"); err == nil || !strings.Contains(err.Error(), "want auto, kvm or tcg") {
		t.Errorf("ParseMode(hvf) = %v", err)
	}
}

// TestProbeThisHost runs the real probe. Its result depends on the host, so
// it only checks that a negative answer carries a reason; on this project's
// CI machine (nested PVM) the answer must be negative.
func TestProbeThisHost(t *testing.T) {
	err := ProbeKVM()
	t.Logf("ProbeKVM() = %v", err)
	if err != nil && err.Error() == "" {
		t.Fatal("negative probe without a reason")
	}
	if probeMissing := probeKVMDevice(t.TempDir() + "/kvm"); probeMissing == nil || !strings.Contains(probeMissing.Error(), "no ") {
		t.Fatalf("probe of a missing device = %v", probeMissing)
	}
}
