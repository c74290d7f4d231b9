package sandbox

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strings"
)

// consoleTailBytes bounds how much of the console log is read for a tail.
const consoleTailBytes = 64 << 10

// ConsoleTail returns the last n lines of the serial console log at path,
// without carriage returns. A missing or empty log gives "", and so does
// one that is not a regular file of one link (OpenSandboxFile: a symlink a
// QEMU planted is not followed).
func ConsoleTail(path string, n int) string {
	f, _, err := OpenSandboxFile(path, os.O_RDONLY, nil)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := fi.Size() - consoleTailBytes
	if off < 0 {
		off = 0
	}
	buf, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return ""
	}
	buf = bytes.ReplaceAll(buf, []byte("\r"), nil)
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	// A panic's stack trace easily fills the tail: keep the lines that say
	// what happened, from before the tail, in front of it.
	var marks []string
	for _, l := range lines[:len(lines)-n] {
		if consoleMarker.MatchString(l) && len(marks) < 5 {
			marks = append(marks, l)
		}
	}
	tail := lines[len(lines)-n:]
	if len(marks) > 0 {
		tail = append(append(marks, "[...]"), tail...)
	}
	return strings.Join(tail, "\n")
}

// consoleMarker matches console lines that explain a guest's death: kernel
// panics and oopses, sysrq crashes, the OOM killer and initramfs failures.
var consoleMarker = regexp.MustCompile(`Kernel panic|sysrq: |BUG: |Oops|Out of memory|FATAL`)
