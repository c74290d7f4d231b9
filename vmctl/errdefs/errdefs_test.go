package errdefs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

var (
	errTaken = errdefs.New(errdefs.ErrAlreadyExists, "name_taken", "sandbox name taken")
	errOther = errdefs.New(errdefs.ErrAlreadyExists, "name_taken", "snapshot name taken")
)

func TestSentinelMatchesItselfAndCategory(t *testing.T) {
	err := fmt.Errorf("create w1: %w", errTaken)
	if !errors.Is(err, errTaken) || !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatal("a wrapped sentinel must match itself and its category")
	}
	if errors.Is(err, errOther) || errors.Is(err, errdefs.ErrNotFound) {
		t.Fatal("a sentinel must not match another sentinel of the same reason, nor another category")
	}
	var s *errdefs.Error
	if !errors.As(err, &s) || s.Reason() != "name_taken" || !errdefs.HasReason(err, "name_taken") {
		t.Fatal("Reason")
	}
	if errdefs.Category(err) != errdefs.ErrAlreadyExists {
		t.Fatal("Category")
	}
	if err.Error() != "create w1: sandbox name taken" {
		t.Fatalf("text %q", err)
	}
}

func TestWithMessageAndDetails(t *testing.T) {
	err := errdefs.WithDetails(errTaken.WithMessage("name w1 is taken: choose another"), map[string]any{"n": 1})
	err = fmt.Errorf("outer: %w", err)
	if err.Error() != "outer: name w1 is taken: choose another" {
		t.Fatalf("text %q", err)
	}
	if !errors.Is(err, errTaken) || !errdefs.HasReason(err, "name_taken") || errdefs.Details(err)["n"] != 1 {
		t.Fatal("message or details hide the sentinel")
	}
}

func TestJoinAndContext(t *testing.T) {
	gone := errdefs.New(errdefs.ErrUnavailable, "guest_died", "guest died")
	err := errors.Join(errTaken, gone)
	if !errdefs.HasReason(err, "guest_died") || !errdefs.HasReason(err, "name_taken") || errdefs.HasReason(err, "x") {
		t.Fatal("HasReason must see every joined error")
	}
	if errdefs.Category(fmt.Errorf("x: %w", context.Canceled)) != errdefs.ErrCanceled || errdefs.Category(context.DeadlineExceeded) != errdefs.ErrDeadlineExceeded {
		t.Fatal("context errors are categorised")
	}
	if errdefs.Category(errors.New("boom")) != nil || errdefs.ErrNotFound.Unwrap() != nil {
		t.Fatal("an uncategorised error has no category")
	}
}
