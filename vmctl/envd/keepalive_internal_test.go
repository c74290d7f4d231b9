package envd

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestKeepaliveInterval: seconds as E2B's SDK sends them; what is no
// positive number of seconds a Duration holds asks for none (a huge
// number must not wrap around into a nanosecond ticker).
func TestKeepaliveInterval(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"":                  0,
		"50":                50 * time.Second,
		"0":                 0,
		"-3":                0,
		"x":                 0,
		"9223372036":        9223372036 * time.Second,
		"9223372037":        0,
		"20211507185753197": 0, // × 1e9 wraps to 512 ns
	} {
		h := http.Header{}
		h.Set(keepaliveHeader, in)
		if got := keepaliveInterval(h); got != want {
			t.Errorf("keepaliveInterval(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestKeepaliveStops: keepalives start when started is closed, and no
// send happens once stop returned (the stream is the handler's only
// until it returns).
func TestKeepaliveStops(t *testing.T) {
	var sends atomic.Int32
	var stopped atomic.Bool
	var late atomic.Int32
	send := func() error {
		if stopped.Load() {
			late.Add(1)
		}
		sends.Add(1)
		time.Sleep(2 * time.Millisecond)
		return nil
	}
	started := make(chan struct{})
	stop := keepalive(context.Background(), time.Millisecond, started, send)
	time.Sleep(20 * time.Millisecond)
	if n := sends.Load(); n != 0 {
		t.Fatalf("%d keepalives before the start", n)
	}
	close(started)
	deadline := time.Now().Add(10 * time.Second)
	for sends.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	stopped.Store(true)
	time.Sleep(20 * time.Millisecond)
	if n := sends.Load(); n < 3 || late.Load() != 0 {
		t.Errorf("%d keepalives, %d after stop returned", n, late.Load())
	}
	stop() // twice is harmless

	// A failed send ends them; so does the context.
	var mu sync.Mutex
	calls := 0
	stop = keepalive(context.Background(), time.Millisecond, nil, func() error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return context.Canceled
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return calls }
	for deadline := time.Now().Add(10 * time.Second); count() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // 20 more intervals: none may send
	stop()
	if calls != 1 {
		t.Errorf("%d sends after a failed one, want 1", calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stop = keepalive(ctx, time.Millisecond, nil, func() error { t.Error("send after the context ended"); return nil })
	time.Sleep(10 * time.Millisecond)
	stop()
	keepalive(ctx, 0, nil, func() error { t.Error("send without an interval"); return nil })()
}
