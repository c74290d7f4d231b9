package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// TestErrorsWrapTheirCategory: the store's errors match their errdefs
// category with errors.Is, so errors.Is(err, errdefs.ErrNotFound) holds
// for an exec the store does not have, as errors.Is(err, ErrNotFound)
// does.
func TestErrorsWrapTheirCategory(t *testing.T) {
	for _, c := range []struct {
		err      error
		category *errdefs.Error
	}{
		{ErrNotFound, errdefs.ErrNotFound},
		{ErrInvalid, errdefs.ErrInvalidArgument},
		{ErrLocked, errdefs.ErrFailedPrecondition},
		{ErrSchema, errdefs.ErrFailedPrecondition},
	} {
		if errdefs.Category(c.err) != c.category {
			t.Errorf("%v: category %v, want %v", c.err, errdefs.Category(c.err), c.category)
		}
	}
	s, _ := openTemp(t)
	_, err := s.Exec("cccccccccccc", "e000001")
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Exec of an unknown sandbox: %v, want ErrNotFound and errdefs.ErrNotFound", err)
	}
	if !strings.HasSuffix(err.Error(), "exec e000001 of sandbox cccccccccccc: not found") {
		t.Fatalf("text %q: the sentinel's text is unchanged", err)
	}
}
