package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// BenchmarkPause measures, side by side in one run (use -benchtime=1x):
// pause and resume in memory; pause to disk and resume of a 512 MiB and a
// 1 GiB guest with half its memory filled (time, the saved state's disk
// bytes, QEMU's RSS before, during and after); and resume from disk →
// first exec against a cold create → first exec. Figures are reported
// as metrics (ms, MiB).
func BenchmarkPause(b *testing.B) {
	f := newFixture(b, testenv.Image(b))
	ctx := context.Background()
	mk := func(b *testing.B, mem int) *sandbox.Sandbox {
		sb, err := f.mgr.Create(ctx, sandbox.Options{Image: f.img, Accel: tcg, MemoryMiB: mem})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.mgr.Destroy(context.Background(), sb) })
		return sb
	}
	run := func(b *testing.B, sb *sandbox.Sandbox, script string) {
		var out bytes.Buffer
		st, err := sb.Exec(ctx, agentproto.ExecRequest{Argv: []string{"sh", "-c", script}}, nil, &out, &out)
		if err != nil || st.Code != 0 {
			b.Fatalf("exec %q: %v %+v %s", script, err, st, out.String())
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }

	b.Run("InMemory", func(b *testing.B) {
		sb := mk(b, 512)
		var pause, resume time.Duration
		for range b.N {
			t := time.Now()
			if err := f.mgr.Pause(ctx, sb, false, "bench"); err != nil {
				b.Fatal(err)
			}
			pause += time.Since(t)
			t = time.Now()
			if err := f.mgr.Resume(ctx, sb, sandbox.ResumeOptions{}); err != nil {
				b.Fatal(err)
			}
			resume += time.Since(t)
		}
		b.ReportMetric(ms(pause)/float64(b.N), "pause-ms")
		b.ReportMetric(ms(resume)/float64(b.N), "resume-ms")
	})
	for _, mem := range []int{512, 1024} {
		b.Run(fmt.Sprintf("ToDisk%dMiB", mem), func(b *testing.B) {
			sb := mk(b, mem)
			// Half the guest's memory held by a process, random bytes.
			run(b, sb, fmt.Sprintf(`setsid python3 -c 'import os, time; b = os.urandom(%d << 20); open("/tmp/filled", "w").close(); time.sleep(1e9)' </dev/null >/dev/null 2>&1 &
while [ ! -e /tmp/filled ]; do sleep 0.2; done`, mem/2))
			for range b.N {
				before, _ := qemuRSS(sb.Domain)
				t := time.Now()
				if err := f.mgr.Pause(ctx, sb, true, "bench"); err != nil {
					b.Fatal(err)
				}
				pause := time.Since(t)
				p := sb.Record().Paused
				during, _ := qemuRSS(sb.Domain)
				t = time.Now()
				if err := f.mgr.Resume(ctx, sb, sandbox.ResumeOptions{Image: f.img}); err != nil {
					b.Fatal(err)
				}
				resume := time.Since(t)
				run(b, sb, "true")
				first := time.Since(t)
				after, _ := qemuRSS(sb.Domain)
				b.ReportMetric(ms(pause), "pause-ms")
				b.ReportMetric(ms(resume), "resume-ms")
				b.ReportMetric(ms(first), "resume-to-first-exec-ms")
				b.ReportMetric(mib(p.VMStateBytes), "vmstate-MiB")
				b.ReportMetric(mib(p.DiskBytes), "disk-MiB")
				b.ReportMetric(mib(before), "rss-before-MiB")
				b.ReportMetric(mib(during), "rss-during-MiB")
				b.ReportMetric(mib(after), "rss-after-MiB")
			}
		})
	}
	b.Run("ColdCreateToFirstExec", func(b *testing.B) {
		for range b.N {
			t := time.Now()
			sb := mk(b, 512)
			run(b, sb, "true")
			b.ReportMetric(ms(time.Since(t)), "create-to-first-exec-ms")
		}
	})
}
