package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// TEMPORARY until vmctl/overlay has Copy, Snapshots and
// DeleteSnapshotOffline (H1): the same operations with cp and qemu-img.

type ovSnapshot struct {
	Tag         string
	VMStateSize int64
}

func ovCopy(ctx context.Context, src, dst string) error {
	tmp := dst + ".tmp"
	out, err := exec.CommandContext(ctx, "cp", "--reflink=auto", "--sparse=always", src, tmp).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		if _, serr := os.Stat(src); serr != nil {
			return serr
		}
		return fmt.Errorf("cp %s: %v: %s", src, err, strings.TrimSpace(string(out)))
	}
	return os.Rename(tmp, dst)
}

func ovSnapshots(ctx context.Context, path string) ([]ovSnapshot, error) {
	out, err := exec.CommandContext(ctx, "qemu-img", "snapshot", "-U", "-l", path).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("qemu-img snapshot -l %s: %v: %s", path, err, strings.TrimSpace(string(out)))
	}
	var list []ovSnapshot
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] == "ID" {
			continue
		}
		if _, err := strconv.Atoi(f[0]); err != nil {
			continue
		}
		list = append(list, ovSnapshot{Tag: f[1], VMStateSize: parseSize(f[2] + " " + f[3])})
	}
	return list, nil
}

func parseSize(s string) int64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	unit := ""
	if len(f) > 1 {
		unit = f[1]
	}
	mult := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
	if mult == 0 {
		mult = 1
	}
	return int64(v * mult)
}

func ovDeleteOffline(ctx context.Context, path, tag string) error {
	out, err := exec.CommandContext(ctx, "qemu-img", "snapshot", "-d", tag, path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("qemu-img snapshot -d %s %s: %v: %s", tag, path, err, strings.TrimSpace(string(out)))
	}
	return nil
}
