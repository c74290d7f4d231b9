package envd

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// keepaliveHeader is the request header in which E2B's SDK asks for
// keepalive events on a stream, in seconds between two.
const keepaliveHeader = "Keepalive-Ping-Interval"

// keepaliveInterval returns the interval between keepalive events h asks
// for, 0 for none (no header, or no positive number of seconds a
// time.Duration holds).
func keepaliveInterval(h http.Header) time.Duration {
	n, err := strconv.ParseInt(h.Get(keepaliveHeader), 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/int64(time.Second) {
		return 0
	}
	return time.Duration(n) * time.Second
}

// keepalive calls send every interval, from when started is closed (nil:
// at once), until ctx ends, a send fails or stop is called; every 0
// sends nothing. stop returns once no send runs or will run: a stream's
// Send must not be called after its handler returned. It is safe to call
// more than once.
func keepalive(ctx context.Context, every time.Duration, started <-chan struct{}, send func() error) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if started != nil {
			select {
			case <-started:
			case <-ctx.Done():
				return
			}
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ctx.Err() != nil || send() != nil {
					return
				}
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}
