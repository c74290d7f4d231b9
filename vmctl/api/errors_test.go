package api_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

var (
	errNotRunning = errdefs.New(errdefs.ErrFailedPrecondition, api.CodeNotRunning, "not running")
	errGuestDied  = errdefs.New(errdefs.ErrUnavailable, api.CodeGuestDied, "guest died")
)

// TestErrorFrom: categories and reasons get the table's status and code,
// the message is the error's text, details survive wrapping.
func TestErrorFrom(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("x: %w", errdefs.ErrNotFound), http.StatusNotFound, api.CodeNotFound},
		{fmt.Errorf("x: %w", errNotRunning), http.StatusConflict, api.CodeNotRunning},
		{errors.Join(errNotRunning, errGuestDied), http.StatusServiceUnavailable, api.CodeGuestDied},
		{errdefs.ErrFailedPrecondition.WithMessage("no kvm"), http.StatusUnprocessableEntity, api.CodeInvalidArgument},
		{errdefs.ErrInvalidArgument, http.StatusBadRequest, api.CodeInvalidArgument},
		{errdefs.ErrNotImplemented, http.StatusNotImplemented, api.CodeNotImplemented},
		{errors.New("boom"), http.StatusInternalServerError, api.CodeInternal},
		{fmt.Errorf("wrapped: %w", api.Errorf(http.StatusGone, api.CodeOutputDropped, "gone")), http.StatusGone, api.CodeOutputDropped},
	} {
		got := api.ErrorFrom(tc.err)
		if got.Status != tc.status || got.Code != tc.code {
			t.Errorf("ErrorFrom(%v) = %d %s; want %d %s", tc.err, got.Status, got.Code, tc.status, tc.code)
		}
		// What a client decodes (status and code) reads back as a
		// category tc.err has (ErrInternal for an uncategorised one).
		back := errdefs.Category(&api.Error{Status: got.Status, Code: got.Code})
		if want := errdefs.Category(tc.err); want == nil && back != errdefs.ErrInternal || want != nil && !errors.Is(tc.err, back) {
			t.Errorf("ErrorFrom(%v) = %d %s reads back as %v", tc.err, got.Status, got.Code, back)
		}
	}
	err := fmt.Errorf("create: %w", errdefs.WithDetails(errdefs.ErrResourceExhausted.WithMessage("full"), map[string]any{"n": 1}))
	if e := api.ErrorFrom(err); e.Message != "create: full" || e.Details["n"] != 1 || e.Code != api.CodeCapacity {
		t.Errorf("ErrorFrom(%v) = %+v", err, e)
	}
	if api.ErrorFrom(nil) != nil {
		t.Error("ErrorFrom(nil) != nil")
	}
}

// TestAnsweredErrorMatches: an *Error a client decoded matches its
// category and the sentinels of its reason, not others.
func TestAnsweredErrorMatches(t *testing.T) {
	var err error = fmt.Errorf("exec: %w", &api.Error{Status: http.StatusConflict, Code: api.CodeNotRunning, Message: "stopped"})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !errors.Is(err, errNotRunning) {
		t.Error("a 409 sandbox_not_running does not match its category and sentinel")
	}
	if errors.Is(err, errGuestDied) || errors.Is(err, errdefs.ErrNotFound) {
		t.Error("a 409 sandbox_not_running matches another reason or category")
	}
	if !errors.Is(&api.Error{Code: api.CodeNotFound}, errdefs.ErrNotFound) || !errors.Is(&api.Error{Code: "what"}, errdefs.ErrInternal) {
		t.Error("codes without a reason match their category; unknown ones ErrInternal")
	}
}

// TestHasCode: the code of an *Error anywhere in the chain, nothing else.
func TestHasCode(t *testing.T) {
	err := fmt.Errorf("delete: %w", api.Errorf(http.StatusNotFound, api.CodeNotFound, "no sandbox"))
	if !api.HasCode(err, api.CodeNotFound) || api.HasCode(err, api.CodeConflict) {
		t.Error("HasCode does not see the wrapped *Error's code")
	}
	if api.HasCode(errdefs.ErrNotFound, api.CodeNotFound) || api.HasCode(nil, api.CodeNotFound) {
		t.Error("HasCode matches an error that is no *Error")
	}
}
