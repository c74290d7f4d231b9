package revert_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/revert"
)

func TestFailRunsNewestFirstAndJoins(t *testing.T) {
	var order []string
	r := revert.New()
	errB := errors.New("b broke")
	r.Add("a", func(context.Context) error { order = append(order, "a"); return nil })
	r.Add("b", func(context.Context) error { order = append(order, "b"); return errB })
	r.Add("c", func(context.Context) error { order = append(order, "c"); return errors.New("c broke") })
	err := r.Fail(context.Background())
	if got := strings.Join(order, ","); got != "c,b,a" {
		t.Fatalf("order %s, want c,b,a", got)
	}
	if !errors.Is(err, errB) {
		t.Fatalf("Fail = %v, want it to wrap b's error", err)
	}
	if s := err.Error(); !strings.Contains(s, "undo c: c broke") || !strings.Contains(s, "undo b: b broke") {
		t.Fatalf("Fail = %q: want each undo's name with its error", s)
	}
	if err := r.Fail(context.Background()); err != nil || len(order) != 3 {
		t.Fatalf("a second Fail ran undos again: %v, order %v", err, order)
	}
}

func TestSuccessForgets(t *testing.T) {
	ran := false
	r := revert.New()
	r.Add("a", func(context.Context) error { ran = true; return nil })
	r.Success()
	if err := r.Fail(context.Background()); err != nil || ran {
		t.Fatalf("Fail after Success ran an undo (err %v)", err)
	}
}

func TestUndoContextNotCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var r revert.List
	r.Add("a", func(ctx context.Context) error { return ctx.Err() })
	if err := r.Fail(ctx); err != nil {
		t.Fatalf("undo saw a cancelled context: %v", err)
	}
}

func TestOnError(t *testing.T) {
	setup := func(fail bool) (ran bool, err error) {
		r := revert.New()
		defer r.OnError(context.Background(), &err)
		r.Add("a", func(context.Context) error { ran = true; return errors.New("undo broke") })
		if fail {
			return ran, errors.New("step broke")
		}
		r.Success()
		return ran, nil
	}
	if _, err := setup(false); err != nil {
		t.Fatalf("success: %v", err)
	}
	_, err := setup(true)
	if err == nil || !strings.Contains(err.Error(), "step broke") || !strings.Contains(err.Error(), "undo a: undo broke") {
		t.Fatalf("failure: %v, want the step's and the undo's error joined", err)
	}
}

func TestUnwindKeepsDeadlineAndErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var order []string
	errB := errors.New("b broke")
	r := revert.New()
	r.Add("a", func(ctx context.Context) error {
		order = append(order, "a")
		if _, ok := ctx.Deadline(); !ok {
			t.Error("Unwind dropped ctx's deadline")
		}
		return nil
	})
	r.Add("b", func(context.Context) error { order = append(order, "b"); return errB })
	err := r.Unwind(ctx)
	if got := strings.Join(order, ","); got != "b,a" {
		t.Fatalf("order %s, want b,a", got)
	}
	if !errors.Is(err, errB) || err.Error() != "b broke" {
		t.Fatalf("Unwind = %v, want b's error as it returned it", err)
	}
	if err := r.Unwind(ctx); err != nil || len(order) != 2 {
		t.Fatalf("a second Unwind ran undos again: %v, order %v", err, order)
	}
}
