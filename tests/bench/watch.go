package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/image"
)

// benchWatch measures file-watch event latency in one sandbox (11):
//
//   - in the guest, write(2) → the guest agent reading its inotify event:
//     a guest process appends a byte every 20 ms and prints the guest
//     clock before each write; each WRITE event carries the guest clock
//     when the agent read it (same clock, no offset);
//   - from the host, an upload (PUT /files) starting → its RENAME event
//     (the atomic write's last step) arriving at the host client, next to
//     the upload's own duration: what a host program writing a file and
//     watching for it sees end to end.
func benchWatch(ctx context.Context, img *image.Image, bin, uri string, n int) {
	d := startBenchDaemon(bin, uri)
	defer d.stop()
	cl := d.cl
	sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img.Dir, Accel: "tcg", MemoryMiB: 256})
	if err != nil {
		d.stop()
		fail(fmt.Errorf("create: %w", err))
	}
	defer cl.DeleteSandbox(context.Background(), sb.ID, true)
	failf := func(format string, args ...any) {
		cl.DeleteSandbox(context.Background(), sb.ID, true)
		d.stop()
		fail(fmt.Errorf(format, args...))
	}
	if err := cl.Mkdir(ctx, sb.ID, api.MkdirRequest{Path: "/work/w", Parents: true}); err != nil {
		failf("mkdir: %v", err)
	}

	wctx, stop := context.WithCancel(ctx)
	events := make(chan api.WatchEvent, 4*n+16)
	arrived := make(chan time.Time, 4*n+16)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- cl.Watch(wctx, sb.ID, "/work/w", false, func() { close(ready) }, func(ev api.WatchEvent) error {
			arrived <- time.Now()
			events <- ev
			return nil
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		failf("watch: %v", err)
	}
	next := func(match func(api.WatchEvent) bool) (api.WatchEvent, time.Time) {
		for {
			select {
			case ev := <-events:
				at := <-arrived
				if match(ev) {
					return ev, at
				}
			case <-time.After(time.Minute):
				failf("no watch event within a minute")
			}
		}
	}

	// In the guest: write → agent read, on the guest clock.
	script := fmt.Sprintf("import time\nf = open('/work/w/g', 'ab', buffering=0)\nfor i in range(%d):\n    t = time.time_ns(); f.write(b'x'); print(t, flush=True); time.sleep(0.02)\n", n)
	var out bytes.Buffer
	st, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", "-c", script}}, &out, io.Discard)
	if err != nil || st.ExitCode != 0 {
		failf("writer: %v %+v", err, st)
	}
	next(func(ev api.WatchEvent) bool { return ev.Op == api.WatchCreate && ev.Path == "/work/w/g" })
	// The kernel merges a WRITE into an unread one: a merged event
	// stands for the writes up to when it was read, and its latency is
	// the first one's.
	var writes []time.Time
	for _, line := range strings.Fields(out.String()) {
		wrote, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			failf("writer output %q", line)
		}
		writes = append(writes, time.Unix(0, wrote))
	}
	var inGuest []time.Duration
	for len(writes) > 0 {
		ev, _ := next(func(ev api.WatchEvent) bool { return ev.Op == api.WatchWrite && ev.Path == "/work/w/g" })
		inGuest = append(inGuest, ev.Time.Sub(writes[0]))
		for len(writes) > 0 && !writes[0].After(ev.Time) {
			writes = writes[1:]
		}
	}

	// From the host: upload start → RENAME event at the host.
	var endToEnd, uploads []time.Duration
	for i := range n {
		p := fmt.Sprintf("/work/w/h%d", i)
		start := time.Now()
		if _, err := cl.Upload(ctx, sb.ID, p, strings.NewReader("x"), 0o644, false); err != nil {
			failf("upload: %v", err)
		}
		uploads = append(uploads, time.Since(start))
		_, at := next(func(ev api.WatchEvent) bool { return ev.Op == api.WatchRename && ev.To == p })
		endToEnd = append(endToEnd, at.Sub(start))
	}
	stop()
	<-done

	fmt.Printf("## 11. File watch event latency (%d events each)\n\n", n)
	fmt.Printf("| path | p50 | p99 |\n|---|---|---|\n")
	fmt.Printf("| guest write(2) → guest agent reads the event (guest clock; %d events for %d writes) | %s | %s |\n", len(inGuest), n, ms(median(inGuest)), ms(pct(inGuest, 99)))
	fmt.Printf("| host upload start → its RENAME event at the host client | %s | %s |\n", ms(median(endToEnd)), ms(pct(endToEnd, 99)))
	fmt.Printf("| (the upload call alone) | %s | %s |\n\n", ms(median(uploads)), ms(pct(uploads, 99)))
}
