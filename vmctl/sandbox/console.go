package sandbox

import (
	"bytes"
	"io"
	"os"
	"strings"
)

// consoleTailBytes bounds how much of the console log is read for a tail.
const consoleTailBytes = 64 << 10

// ConsoleTail returns the last n lines of the serial console log at path,
// without carriage returns. A missing or empty log gives "".
func ConsoleTail(path string, n int) string {
	f, err := os.Open(path)
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
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
