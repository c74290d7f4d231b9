package daemon

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// hostMemoryMiB reads MemTotal from /proc/meminfo (proc(5)); 0 if unknown.
func hostMemoryMiB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}
