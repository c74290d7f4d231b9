package domain

import (
	"errors"
	"strings"
	"testing"
)

func TestTuneValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tune  Tune
		typ   Type
		field string // "" = valid
	}{
		{"zero", Tune{}, TypeQEMU, ""},
		{"all", Tune{CPUQuotaPercent: 6400, MemoryHardLimitMiB: 513, BlkioWeight: 1000, DiskBytesPerSec: 1, DiskIOPS: 1, TCGCacheMiB: 1}, TypeQEMU, ""},
		{"quota too big", Tune{CPUQuotaPercent: 6401}, TypeQEMU, "Tune.CPUQuotaPercent"},
		{"hard limit not above RAM", Tune{MemoryHardLimitMiB: 512}, TypeQEMU, "Tune.MemoryHardLimitMiB"},
		{"weight too small", Tune{BlkioWeight: 99}, TypeQEMU, "Tune.BlkioWeight"},
		{"weight too big", Tune{BlkioWeight: 1001}, TypeQEMU, "Tune.BlkioWeight"},
		{"tcg cache on kvm", Tune{TCGCacheMiB: 64}, TypeKVM, "Tune.TCGCacheMiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			s.Type = tc.typ
			s.Tune = tc.tune
			err := s.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidSpec) || !strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Fatalf("Validate = %v, want an ErrInvalidSpec naming %s", err, tc.field)
			}
		})
	}
}

func TestTuneCPUQuotaIsGlobal(t *testing.T) {
	s := validSpec()
	s.VCPUs = 2
	s.Tune.CPUQuotaPercent = 150
	x, err := XML(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<global_period>100000</global_period>", "<global_quota>150000</global_quota>"} {
		if !strings.Contains(x, want) {
			t.Errorf("XML lacks %s:\n%s", want, x)
		}
	}
	if strings.Contains(x, "<quota>") || strings.Contains(x, "<period>") {
		t.Errorf("XML has a per-vCPU period/quota:\n%s", x)
	}
}
