package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// resourceFlags are the per-sandbox resource flags of create and run
// (besides --cpus and --memory).
func resourceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.Int64Flag{Name: "disk", Usage: "root disk size in `MiB`, at least the image's disk; the guest's root file system grows to it", DefaultText: "the image's"},
		&cli.IntFlag{Name: "cpu-quota", Usage: "cap the whole VM at `PERCENT` of one host CPU (50: half a CPU, 200: two)", DefaultText: "none"},
		&cli.Int64Flag{Name: "io-bps", Usage: "throttle the root disk to `BYTES` per second, reads and writes together", DefaultText: "none"},
		&cli.Int64Flag{Name: "iops", Usage: "throttle the root disk to `N` operations per second", DefaultText: "none"},
		&cli.IntFlag{Name: "io-weight", Usage: "relative block I/O `WEIGHT`, 100..1000", DefaultText: "none"},
		&cli.Int64Flag{Name: "pids", Usage: "cap the host tasks (processes and threads) of the sandbox's QEMU process at `N`", DefaultText: "256"},
	}
}

// resourceRequest reads the resource flags.
func resourceRequest(c *cli.Context) (sandbox.ResourceRequest, error) {
	r := sandbox.ResourceRequest{
		DiskMiB: c.Int64("disk"), CPUQuotaPercent: c.Int("cpu-quota"),
		IOBytesPerSec: c.Int64("io-bps"), IOPS: c.Int64("iops"), IOWeight: c.Int("io-weight"), Pids: c.Int64("pids"),
	}
	if r.DiskMiB < 0 || r.CPUQuotaPercent < 0 || r.IOBytesPerSec < 0 || r.IOPS < 0 || r.IOWeight < 0 || r.Pids < 0 {
		return r, fmt.Errorf("--disk, --cpu-quota, --io-bps, --iops, --io-weight and --pids must be positive")
	}
	return r, nil
}

// setResources copies the resource flags into a create request.
func setResources(c *cli.Context, req *api.CreateSandboxRequest) error {
	r, err := resourceRequest(c)
	if err != nil {
		return err
	}
	req.DiskMiB, req.CPUQuotaPercent, req.IOBps, req.IOPS, req.IOWeight, req.Pids =
		r.DiskMiB, r.CPUQuotaPercent, r.IOBytesPerSec, r.IOPS, r.IOWeight, r.Pids
	return nil
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
		&cli.Int64Flag{Name: "max-iops", Usage: "refuse (422) a disk operations cap over `N`/s; sandboxes that ask for none get it", DefaultText: "no ceiling"},
		&cli.Int64Flag{Name: "max-pids", Usage: "refuse (422) a QEMU host task limit over `N`", DefaultText: "no ceiling"},
		&cli.IntFlag{Name: "warn-percent", Value: 80, Usage: "audit and publish a warning when a sandbox's QEMU memory or disk use reaches `PERCENT` of its limit (negative: off)"},
		&cli.IntFlag{Name: "act-percent", Value: 95, Usage: "stop a sandbox whose QEMU memory or disk use reaches `PERCENT` of its limit (negative: off)"},
		&cli.DurationFlag{Name: "usage-interval", Value: daemon.DefaultUsageInterval, Usage: "sample running sandboxes' usage every `DURATION`"},
	}
}

// daemonResources reads serve's resource flags.
func daemonResources(c *cli.Context) (daemon.Ceilings, daemon.Thresholds, time.Duration) {
	return daemon.Ceilings{
			VCPUs: c.Int("max-vcpus"), MemoryMiB: c.Int("max-memory"), DiskMiB: c.Int64("max-disk"),
			CPUQuotaPercent: c.Int("max-cpu-quota"), IOBps: c.Int64("max-io-bps"), IOPS: c.Int64("max-iops"), Pids: c.Int64("max-pids"),
		}, daemon.Thresholds{WarnPercent: c.Int("warn-percent"), ActPercent: c.Int("act-percent")},
		c.Duration("usage-interval")
}
