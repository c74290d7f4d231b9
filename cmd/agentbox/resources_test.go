package main

import (
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		s     string
		shift uint
		want  int64
	}{
		{"4096", 20, 4096}, {"4G", 20, 4096}, {"4g", 20, 4096}, {"4Gi", 20, 4096}, {"4GiB", 20, 4096},
		{"1T", 20, 1 << 20}, {"512M", 20, 512}, {"2048K", 20, 2}, {"0", 20, 0},
		{"52428800", 0, 50 << 20}, {"50M", 0, 50 << 20}, {"1K", 0, 1024}, {"1G", 0, 1 << 30},
	} {
		if got, err := parseSize(tc.s, tc.shift); err != nil || got != tc.want {
			t.Errorf("parseSize(%q, %d) = %d, %v; want %d", tc.s, tc.shift, got, err, tc.want)
		}
	}
	for s, want := range map[string]string{
		"4.5G": "not a whole number", "G": "not a whole number", "-1": "must not be negative", "4GB": `unknown suffix "GB" (K, M, G, T: powers of 1024)`,
		"4X": "not a whole number", "1000K": "not a whole number of MiB", "99999999999T": "too large",
	} {
		if _, err := parseSize(s, 20); err == nil || err.Error() != want {
			t.Errorf("parseSize(%q) = %v, want %q", s, err, want)
		}
	}
}

func TestCLIResourceFlags(t *testing.T) {
	d := startDaemon(t)
	img := t.TempDir()
	d.cli(t, nil, "create", "--image", img, "--disk", "4G", "--io-bps", "50M", "--iops", "100", "--cpu-quota", "50", "--io-weight", "200", "--pids", "0").
		check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "create", "--image", img, "--disk", "5000", "--io-bps", "1048576").check(t, 0, "000000abc002\n", "")
	if got := d.mem.Creates(); len(got) != 2 ||
		!equalJSON(got[0], api.CreateSandboxRequest{Image: img, Accel: "auto", BootTimeoutMs: 120000, DiskMiB: 4096, IOBps: 50 << 20, IOPS: 100, CPUQuotaPercent: 50, IOWeight: 200}) ||
		!equalJSON(got[1], api.CreateSandboxRequest{Image: img, Accel: "auto", BootTimeoutMs: 120000, DiskMiB: 5000, IOBps: 1 << 20}) {
		t.Fatalf("create requests %+v", got)
	}
	for _, tc := range []struct{ flag, value, stderr string }{
		{"--cpu-quota", "-5", "agentbox: --cpu-quota -5: must not be negative (want a whole number of percent of one host CPU (e.g. 50))\n"},
		{"--pids", "-1", "agentbox: --pids -1: must not be negative (want a whole number of host tasks (e.g. 512))\n"},
		{"--iops", "1k", "agentbox: --iops 1k: want a whole number of operations per second (e.g. 100)\n"},
		{"--disk", "4GB", "agentbox: --disk 4GB: unknown suffix \"GB\" (K, M, G, T: powers of 1024): want a size in MiB, or with a K, M, G or T suffix (e.g. 4096 or 4G)\n"},
		{"--disk", "-1", "agentbox: --disk -1: must not be negative: want a size in MiB, or with a K, M, G or T suffix (e.g. 4096 or 4G)\n"},
		{"--io-bps", "fast", "agentbox: --io-bps fast: not a whole number: want bytes per second, or with a K, M or G suffix (e.g. 52428800 or 50M)\n"},
	} {
		d.cli(t, nil, "create", "--image", img, tc.flag, tc.value).check(t, 125, "", tc.stderr)
	}
	if len(d.mem.Creates()) != 2 {
		t.Errorf("%d creates; bad flags must send none", len(d.mem.Creates()))
	}
}
