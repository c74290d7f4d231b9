package overlay

import "syscall"

// Allocated returns the bytes the file at path takes on the host's disk
// (st_blocks × 512; less than its size when sparse), 0 if it cannot be
// read. A symlink is not followed (its own blocks: a sandbox's QEMU may
// have planted it).
func Allocated(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}
