package policy

import (
	"context"
	"os"
	"testing"
	"time"
)

// BenchmarkCheck measures one decision's round trip to a plugin (this
// test binary) over go-plugin's net/rpc.
func BenchmarkCheck(b *testing.B) {
	b.Setenv(pluginEnv, "ok")
	c, err := NewClient([]string{os.Args[0], "-test.run=^$"}, Options{Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	req := execReq("ls", "-l")
	for b.Loop() {
		if _, err := c.Check(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
