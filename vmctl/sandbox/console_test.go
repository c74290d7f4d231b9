package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConsoleTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	if got := ConsoleTail(path, 3); got != "" {
		t.Fatalf("missing log: %q", got)
	}
	var b strings.Builder
	b.WriteString("boot\r\n[ 1.0] sysrq: Trigger a crash\r\n[ 1.1] Kernel panic - not syncing: sysrq triggered crash\r\n")
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&b, "trace %d\r\n", i)
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
	got := ConsoleTail(path, 3)
	want := "[ 1.0] sysrq: Trigger a crash\n[ 1.1] Kernel panic - not syncing: sysrq triggered crash\n[...]\ntrace 27\ntrace 28\ntrace 29"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	os.WriteFile(path, []byte("a\nb\n"), 0o644)
	if got := ConsoleTail(path, 3); got != "a\nb" {
		t.Fatalf("short log: %q", got)
	}
}
