package audit

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		s    string
		max  int
		want string
	}{
		{"short", 5, "short"},
		{strings.Repeat("a", 40), 30, strings.Repeat("a", 12) + "…[cut: 40 bytes]"},
		// "é" is two bytes: the cut does not split it.
		{"aaaaaaaaaaaaaéé" + strings.Repeat("b", 20), 32, "aaaaaaaaaaaaa…[cut: 37 bytes]"},
		{strings.Repeat("a", 40), 4, "…[cut: 40 bytes]"},
	} {
		got := Cut(tc.s, tc.max)
		if got != tc.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tc.s, tc.max, got, tc.want)
		}
		if len(tc.s) > tc.max && tc.max >= len("…[cut: 40 bytes]") && len(got) > tc.max {
			t.Errorf("Cut(%q, %d) is %d bytes long", tc.s, tc.max, len(got))
		}
	}
	s := strings.Repeat("h", 1<<20)
	if got := Cut(s, MaxFieldBytes); len(got) != MaxFieldBytes || !strings.HasSuffix(got, "hh…[cut: 1048576 bytes]") {
		t.Errorf("Cut of 1 MiB: %d bytes ending %q", len(got), got[len(got)-30:])
	}
}

// lines returns the lengths and entries of the active file's lines.
func lines(t *testing.T, dir string) ([]int, []Entry) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sizes []int
	var es []Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		sizes = append(sizes, len(sc.Bytes())+1)
		e, err := decodeLine(sc.Bytes())
		if err != nil {
			t.Fatalf("line %d: %v", len(sizes), err)
		}
		es = append(es, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sizes, es
}

// TestAppendGuestBounds: a guest-caused entry as the egress proxy's
// refusal of a domain-fronted request makes it, with a 1 MiB Host (in
// its name, its reason quoting it and its error message), stays under
// MaxGuestEntryBytes with every string cut to MaxFieldBytes and saying
// so; strings of control bytes (six bytes each in JSON) and strings deep
// in lists and maps that would pass it are cut further; the entry handed
// in is not changed.
func TestAppendGuestBounds(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	host := strings.Repeat("h", 1<<20)
	reason := fmt.Sprintf("Host %q does not match the TLS server name api.test (domain fronting)", host)
	e := Entry{Sandbox: "sb1", Caller: "guest", Action: ActionEgressIntercept, Error: "refused", ErrorMessage: reason,
		Args: map[string]any{"name": host, "port": 443, "allowed": false, "reason": reason, "upstream": "192.0.2.1:443"}}
	ctl := strings.Repeat("\x01", 3<<10) // under MaxFieldBytes, 18 KiB as JSON
	deep := Entry{Sandbox: "sb1", Caller: "guest", Action: ActionEgressIntercept,
		Args: map[string]any{"list": []any{host, 7}, "strings": []string{host, host}, "nested": map[string]any{host: []string{host}}}}
	for _, e := range []Entry{e, {Sandbox: "sb1", Caller: "guest", Action: ActionEgressIntercept, Args: map[string]any{"name": ctl, "reason": ctl}}, deep} {
		if err := l.AppendGuest(e); err != nil {
			t.Fatal(err)
		}
	}
	if len(e.Args["name"].(string)) != 1<<20 || len(e.ErrorMessage) != len(reason) || len(deep.Args["list"].([]any)[0].(string)) != 1<<20 {
		t.Error("AppendGuest changed the entry it was given")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sizes, es := lines(t, dir)
	if len(es) != 3 {
		t.Fatalf("%d entries, want 3", len(es))
	}
	for i, n := range sizes {
		if n > MaxGuestEntryBytes {
			t.Errorf("entry %d takes %d bytes, over MaxGuestEntryBytes (%d)", i, n, MaxGuestEntryBytes)
		}
	}
	t.Logf("entry sizes %v (bytes)", sizes)
	cutHost, cutReason := Cut(host, MaxFieldBytes), Cut(reason, MaxFieldBytes)
	if !strings.HasSuffix(cutHost, "…[cut: 1048576 bytes]") || !strings.HasSuffix(cutReason, fmt.Sprintf("…[cut: %d bytes]", len(reason))) {
		t.Fatalf("the cut strings end %q, %q", cutHost[len(cutHost)-30:], cutReason[len(cutReason)-30:])
	}
	want := map[string]any{"name": cutHost, "port": float64(443), "allowed": false, "reason": cutReason, "upstream": "192.0.2.1:443"}
	if got := es[0]; !reflect.DeepEqual(got.Args, want) || got.ErrorMessage != cutReason || got.Error != "refused" || got.Caller != "guest" {
		t.Errorf("the 1 MiB Host's entry: args %v, error %q, message of %d bytes, caller %q", len(got.Args), got.Error, len(got.ErrorMessage), got.Caller)
	}
	ctlCut := Cut(ctl, MaxFieldBytes/4)
	if a := es[1].Args; a["name"] != ctlCut || a["reason"] != ctlCut {
		t.Errorf("the control bytes' entry: name of %d bytes, want %d (cut to MaxFieldBytes/4)", len(a["name"].(string)), len(ctlCut))
	}
	h := Cut(host, MaxFieldBytes/4) // six strings of 4 KiB would pass the bound
	want = map[string]any{"list": []any{h, float64(7)}, "strings": []any{h, h}, "nested": map[string]any{h: []any{h}}}
	if !reflect.DeepEqual(es[2].Args, want) {
		t.Errorf("the deep entry's args are not its strings cut to MaxFieldBytes/4")
	}
}

// TestAppendGuestRate: a sandbox's guest-caused entries pass GuestBurst
// at once, then GuestPerSecond; the ones over it are dropped and the
// next one let through is preceded by one ActionGuestDropped entry with
// their count; another sandbox has a bucket of its own; drops still
// owed at Close are summarised then. Time is the test's clock.
func TestAppendGuestRate(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0
	l.guest.now = func() time.Time { return now }
	add := func(sandbox string, n int) {
		t.Helper()
		for i := range n {
			if err := l.AppendGuest(Entry{Sandbox: sandbox, Tenant: "acme", Caller: "guest", Action: ActionEgressIntercept, Args: map[string]any{"i": i}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	add("sb1", GuestBurst+10) // 10 dropped
	add("sb2", 1)             // its own bucket
	now = t0.Add(time.Second / 2)
	add("sb1", 1) // half a token: dropped too
	now = t0.Add(time.Second / 2).Add(time.Second)
	add("sb1", 3) // one token: the summary, one entry, two dropped
	// Owed at Close.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	_, es := lines(t, dir)
	var got []string
	for _, e := range es {
		if e.Action == ActionGuestDropped {
			got = append(got, fmt.Sprintf("%s dropped %v since %v actions %v by %s for %s at %s (%v)", e.Sandbox, e.Args["dropped"], e.Args["since"], e.Args["actions"],
				e.Caller, e.Tenant, e.Time.Sub(t0), e.Args["limit"]))
			continue
		}
		if n := len(got); n > 0 && strings.HasPrefix(got[n-1], e.Sandbox+" entries ") {
			var k int
			fmt.Sscanf(got[n-1], e.Sandbox+" entries %d", &k)
			got[n-1] = fmt.Sprintf("%s entries %d", e.Sandbox, k+1)
		} else {
			got = append(got, e.Sandbox+" entries 1")
		}
	}
	since := t0.Format(time.RFC3339Nano)
	limit := fmt.Sprintf("%d guest-caused entries at once, then %d a second, per sandbox", GuestBurst, GuestPerSecond)
	want := []string{
		fmt.Sprintf("sb1 entries %d", GuestBurst),
		"sb2 entries 1",
		fmt.Sprintf("sb1 dropped 11 since %s actions map[egress.intercept:11] by daemon for acme at 1.5s (%s)", since, limit),
		"sb1 entries 1",
		fmt.Sprintf("sb1 dropped 2 since %s actions map[egress.intercept:2] by daemon for acme at 1.5s (%s)", t0.Add(1500*time.Millisecond).Format(time.RFC3339Nano), limit),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the log holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestGuestBucketsForgotten: past guestBuckets sandboxes, the buckets
// that are full and owe nothing are forgotten; one that owes a summary
// is kept.
func TestGuestBucketsForgotten(t *testing.T) {
	var g guestLimiter
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	g.now = func() time.Time { return now }
	for range GuestBurst + 1 {
		g.admit(Entry{Sandbox: "busy", Action: ActionEgressIntercept, Time: now})
	}
	for i := range guestBuckets - 1 {
		g.admit(Entry{Sandbox: fmt.Sprint("sb", i), Time: now})
	}
	now = now.Add(time.Duration(GuestBurst) * time.Second / GuestPerSecond)
	g.admit(Entry{Sandbox: "new", Time: now})
	if len(g.buckets) != 2 || g.buckets["busy"] == nil || g.buckets["busy"].dropped != 1 || g.buckets["new"] == nil {
		t.Errorf("%d buckets after forgetting, want busy (owing 1) and new", len(g.buckets))
	}
}
