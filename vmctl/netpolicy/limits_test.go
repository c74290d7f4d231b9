package netpolicy

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// TestParseMaxRules: MaxRules distinct rules are accepted, one more is
// refused with ErrTooManyRules (and ErrInvalid, invalid argument) naming
// the limit and the DEST past it; duplicates do not count.
func TestParseMaxRules(t *testing.T) {
	allow := make([]string, 0, MaxRules+1)
	for i := range MaxRules {
		allow = append(allow, fmt.Sprintf("n%d.example.com", i))
	}
	p, err := Parse("allowlist", append(allow, allow...)) // every rule twice
	if err != nil || len(p.Allow) != MaxRules {
		t.Fatalf("Parse of %d distinct rules (each twice): %d rules, %v", MaxRules, len(p.Allow), err)
	}
	_, err = Parse("allowlist", append(allow, "one-more.example.com"))
	want := `invalid network policy: too many network rules: more than 256 distinct --allow rules (at --allow one-more.example.com): a policy has at most 256; use wider names (*.example.com) or ranges, or --network open`
	if err == nil || err.Error() != want {
		t.Fatalf("Parse of %d rules: %v\nwant %s", MaxRules+1, err, want)
	}
	if !errors.Is(err, ErrTooManyRules) || !errors.Is(err, ErrInvalid) || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Parse of %d rules: %v is not ErrTooManyRules, ErrInvalid and invalid argument", MaxRules+1, err)
	}
}

// BenchmarkParseMaxRules parses a policy of MaxRules distinct host rules
// (linear: a set of the rules seen, not a scan per rule).
func BenchmarkParseMaxRules(b *testing.B) {
	allow := make([]string, MaxRules)
	for i := range allow {
		allow[i] = fmt.Sprintf("198.51.100.%d:%d", i%256, 1000+i)
	}
	for b.Loop() {
		if _, err := Parse("allowlist", allow); err != nil {
			b.Fatal(err)
		}
	}
}
