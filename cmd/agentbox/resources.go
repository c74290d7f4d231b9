package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
)

// resourceFlags are the per-sandbox resource flags of create and run
// (besides --cpus and --memory). They are string flags parsed by
// setResources, so a bad value gets an error naming the flag and what
// it takes.
func resourceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "disk", Usage: "root disk size: `SIZE` in MiB, or with a K, M, G or T suffix (KiB, MiB, GiB, TiB; e.g. 4G), a whole number of MiB, at least the image's disk; the guest's root file system grows to it", DefaultText: "the image's"},
		&cli.StringFlag{Name: "cpu-quota", Usage: "cap the whole VM at `PERCENT` of one host CPU (50: half a CPU, 200: two), at most 100 per vCPU; 0: the image's default", DefaultText: "the image's, else none"},
		&cli.StringFlag{Name: "io-bps", Usage: fmt.Sprintf("throttle the root disk to `RATE` bytes per second, reads and writes together: bytes, or with a K, M or G suffix (KiB/s, MiB/s, GiB/s; e.g. 50M), at least 1M (%d); 0: none", resources.MinIOBytesPerSec), DefaultText: "none"},
		&cli.StringFlag{Name: "iops", Usage: fmt.Sprintf("throttle the root disk to `N` operations per second, at least %d; 0: none", resources.MinIOPS), DefaultText: "none"},
		&cli.StringFlag{Name: "io-weight", Usage: "relative block I/O `WEIGHT`, 100..1000; 0: none", DefaultText: "none"},
		&cli.StringFlag{Name: "net-rate", Usage: fmt.Sprintf("cap the network traffic in each direction (to and from the guest) at `RATE` bytes per second on average, with bursts of a tenth of a second: bytes, or with a K, M or G suffix (KiB/s, MiB/s, GiB/s; e.g. 10M), at least 64K (%d); needs --network allowlist or open; 0: none", resources.MinNetBytesPerSec), DefaultText: "none, or the daemon's --max-net-rate"},
		&cli.StringFlag{Name: "pids", Usage: fmt.Sprintf("cap the host tasks (processes and threads) of the sandbox's QEMU process at `N`, at least 32; 0: the default, %d", resources.DefaultPids), DefaultText: fmt.Sprint(resources.DefaultPids)},
	}
}

// setResources reads the resource flags into a create request. Errors
// name the flag, its value and what it takes; ranges beyond the sign
// (minimums, the quota's 100 % per vCPU) are checked by the sandbox
// manager, for the daemon too.
func setResources(c *cli.Context, req *api.CreateSandboxRequest) error {
	var err error
	if req.DiskMiB, err = sizeFlag(c, "disk", 20, "a size in MiB, or with a K, M, G or T suffix (e.g. 4096 or 4G)"); err != nil {
		return err
	}
	if req.IOBps, err = sizeFlag(c, "io-bps", 0, "bytes per second, or with a K, M or G suffix (e.g. 52428800 or 50M)"); err != nil {
		return err
	}
	if req.NetBps, err = sizeFlag(c, "net-rate", 0, "bytes per second, or with a K, M or G suffix (e.g. 10485760 or 10M)"); err != nil {
		return err
	}
	var n int64
	if n, err = countFlag(c, "cpu-quota", "a whole number of percent of one host CPU (e.g. 50)"); err != nil {
		return err
	}
	req.CPUQuotaPercent = int(n)
	if req.IOPS, err = countFlag(c, "iops", "a whole number of operations per second (e.g. 100)"); err != nil {
		return err
	}
	if n, err = countFlag(c, "io-weight", "a whole number 100..1000"); err != nil {
		return err
	}
	req.IOWeight = int(n)
	if req.Pids, err = countFlag(c, "pids", "a whole number of host tasks (e.g. 512)"); err != nil {
		return err
	}
	return nil
}

// countFlag parses an unsuffixed non-negative integer flag (unset: 0).
func countFlag(c *cli.Context, name, takes string) (int64, error) {
	s := strings.TrimSpace(c.String(name))
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("--%s %s: want %s", name, s, takes)
	}
	if v < 0 {
		return 0, fmt.Errorf("--%s %d: must not be negative (want %s)", name, v, takes)
	}
	return v, nil
}

// sizeFlag parses a size flag (unset: 0): a non-negative integer in the
// flag's unit (2^unitShift bytes: 20 for MiB, 0 for bytes), or an
// integer with a binary suffix K, M, G or T (also written Ki, KiB, …;
// powers of 1024 bytes), converted to the flag's unit, which it must be a
// whole multiple of.
func sizeFlag(c *cli.Context, name string, unitShift uint, takes string) (int64, error) {
	s := strings.TrimSpace(c.String(name))
	if s == "" {
		return 0, nil
	}
	v, err := parseSize(s, unitShift)
	if err != nil {
		return 0, fmt.Errorf("--%s %s: %v: want %s", name, s, err, takes)
	}
	return v, nil
}

// parseSize is sizeFlag's parser; see there.
func parseSize(s string, unitShift uint) (int64, error) {
	num := strings.TrimRight(s, "KMGTkmgtiIbB")
	suffix := strings.TrimPrefix(s, num)
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, errors.New("not a whole number")
	}
	if v < 0 {
		return 0, errors.New("must not be negative")
	}
	if suffix == "" {
		return v, nil
	}
	shifts := map[string]uint{"K": 10, "M": 20, "G": 30, "T": 40}
	unit := strings.ToUpper(suffix[:1])
	rest := suffix[1:]
	shift, ok := shifts[unit]
	if !ok || (rest != "" && rest != "i" && rest != "iB") {
		return 0, fmt.Errorf("unknown suffix %q (K, M, G, T: powers of 1024)", suffix)
	}
	if v > math.MaxInt64>>shift {
		return 0, errors.New("too large")
	}
	b := v << shift // bytes
	if b%(1<<unitShift) != 0 {
		return 0, errors.New("not a whole number of MiB")
	}
	return b >> unitShift, nil
}

// resourceServeFlags are serve's ceilings, thresholds and usage interval
// (TOML keys: the same names).
func resourceServeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "max-vcpus", Usage: "refuse (422) sandboxes with more than `N` vCPUs", DefaultText: "no ceiling"},
		&cli.IntFlag{Name: "max-memory", Usage: "refuse (422) sandboxes with more than `MiB` of guest memory", DefaultText: "no ceiling"},
		&cli.Int64Flag{Name: "max-disk", Usage: "refuse (422) sandboxes with a disk over `MiB`", DefaultText: "no ceiling"},
		&cli.IntFlag{Name: "max-cpu-quota", Usage: "refuse (422) a CPU quota over `PERCENT` of one host CPU; sandboxes that ask for none get it", DefaultText: "no ceiling"},
		&cli.Int64Flag{Name: "max-io-bps", Usage: "refuse (422) a disk throughput cap over `BYTES`/s; sandboxes that ask for none get it", DefaultText: "no ceiling"},
		&cli.Int64Flag{Name: "max-net-rate", Usage: "refuse (422) a network cap over `BYTES`/s (each direction); sandboxes with a network that ask for none get it", DefaultText: "no ceiling"},
		&cli.Int64Flag{Name: "max-iops", Usage: "refuse (422) a disk operations cap over `N`/s; sandboxes that ask for none get it", DefaultText: "no ceiling"},
		&cli.Int64Flag{Name: "max-pids", Usage: "refuse (422) a QEMU host task limit over `N`", DefaultText: "no ceiling"},
		&cli.IntFlag{Name: "warn-percent", Value: 80, Usage: "audit and publish a warning when a sandbox's QEMU memory or disk use reaches `PERCENT` of its limit (negative: off)"},
		&cli.IntFlag{Name: "act-percent", Value: 95, Usage: "stop a sandbox whose QEMU memory or disk use reaches `PERCENT` of its limit (negative: off)"},
		&cli.DurationFlag{Name: "usage-interval", Value: daemon.DefaultUsageInterval, Usage: "sample running sandboxes' usage every `DURATION`"},
		&cli.IntFlag{Name: "tcg-cache", Value: resources.DefaultTCGCacheMiB, Usage: fmt.Sprintf("TCG translation cache of each TCG sandbox in `MiB` (%d..%d; counted in its memory limit; KVM sandboxes have none)", resources.MinTCGCacheMiB, resources.MaxTCGCacheMiB)},
	}
}

// daemonResources reads serve's resource flags.
func daemonResources(c *cli.Context) (daemon.Ceilings, daemon.Thresholds, time.Duration) {
	return daemon.Ceilings{
			VCPUs: c.Int("max-vcpus"), MemoryMiB: c.Int("max-memory"), DiskMiB: c.Int64("max-disk"),
			CPUQuotaPercent: c.Int("max-cpu-quota"), IOBps: c.Int64("max-io-bps"), IOPS: c.Int64("max-iops"), Pids: c.Int64("max-pids"),
			NetBps: c.Int64("max-net-rate"),
		}, daemon.Thresholds{WarnPercent: c.Int("warn-percent"), ActPercent: c.Int("act-percent")},
		c.Duration("usage-interval")
}
