package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/revert"
)

// recordStep is a step named name that registers an undo appending name
// to *undone.
func recordStep(name string, undone *[]string) Step {
	return Step{Name: name, Run: func(ctx context.Context, b *Build) error {
		b.Undo.Add(name, func(context.Context) error { *undone = append(*undone, name); return nil })
		return nil
	}}
}

// failStep is a step named name that fails with err.
func failStep(name string, err error) Step {
	return Step{Name: name, Run: func(context.Context, *Build) error { return err }}
}

func TestBuildRunUndoesNewestFirst(t *testing.T) {
	var undone []string
	b := &Build{Undo: revert.New()}
	errC := errors.New("c broke")
	ranD := false
	err := b.Run(context.Background(), "create",
		recordStep("a", &undone), recordStep("b", &undone), failStep("c", errC),
		Step{Name: "d", Run: func(context.Context, *Build) error { ranD = true; return nil }})
	if !errors.Is(err, errC) || !strings.Contains(err.Error(), "create step c: c broke") {
		t.Fatalf("Run = %v, want it to wrap c's error as %q", err, "create step c: c broke")
	}
	if got := strings.Join(undone, ","); got != "b,a" {
		t.Errorf("undo order %q, want b,a", got)
	}
	if ranD {
		t.Error("a step after the failed one ran")
	}
	if err := b.Abort(context.Background()); err != nil || len(undone) != 2 {
		t.Errorf("Abort after the failure: %v, undos %v: want nothing run twice", err, undone)
	}
}

// A warm pool runs a build in two Runs (prepare, then finish when taken):
// a failure in the second undoes what the first made too.
func TestBuildSecondRunUndoesFirst(t *testing.T) {
	var undone []string
	b := &Build{Undo: revert.New()}
	if err := b.Run(context.Background(), "prepare", recordStep("a", &undone), recordStep("b", &undone)); err != nil {
		t.Fatal(err)
	}
	if len(undone) != 0 {
		t.Fatalf("a successful Run undid %v", undone)
	}
	errD := errors.New("d broke")
	err := b.Run(context.Background(), "finish", recordStep("c", &undone), failStep("d", errD))
	if !errors.Is(err, errD) || !strings.Contains(err.Error(), "finish step d: d broke") {
		t.Fatalf("Run = %v, want it to wrap d's error as %q", err, "finish step d: d broke")
	}
	if got := strings.Join(undone, ","); got != "c,b,a" {
		t.Errorf("undo order %q, want c,b,a", got)
	}
}

func TestBuildRunJoinsUndoErrors(t *testing.T) {
	b := &Build{Undo: revert.New()}
	errUndo := errors.New("undo broke")
	errB := errors.New("b broke")
	err := b.Run(context.Background(), "restore",
		Step{Name: "a", Run: func(ctx context.Context, b *Build) error {
			b.Undo.Add("a", func(context.Context) error { return errUndo })
			return nil
		}},
		failStep("b", errB))
	if !errors.Is(err, errB) || !errors.Is(err, errUndo) || !strings.Contains(err.Error(), "restore step b:") || !strings.Contains(err.Error(), "undo a: undo broke") {
		t.Fatalf("Run = %v, want the step's error and the undo's joined", err)
	}
}

// TestBuildRunCallerFaultNamesNoStep: a step refusing the request (bad
// input, a name taken, no capacity) fails with the reason alone, as the
// client must read it; the step stays findable (FailedStep) for logs and
// the audit. Other failures name their step.
func TestBuildRunCallerFaultNamesNoStep(t *testing.T) {
	b := &Build{Undo: revert.New()}
	bad := fmt.Errorf("%w: network cap 10K is below the minimum of 64K", ErrInvalid)
	err := b.Run(context.Background(), "create", failStep("resources", bad))
	if !errors.Is(err, ErrInvalid) || err.Error() != bad.Error() || FailedStep(err) != "resources" {
		t.Errorf("Run = %q (step %q), want %q (step resources)", err, FailedStep(err), bad)
	}
	full := fmt.Errorf("%w: sandbox a already has the name", ErrNameTaken)
	err = b.Run(context.Background(), "restore", failStep("register", full))
	if err.Error() != full.Error() || FailedStep(err) != "register" {
		t.Errorf("Run = %q (step %q), want %q (step register)", err, FailedStep(err), full)
	}
	if FailedStep(errors.New("x")) != "" {
		t.Error("FailedStep of a plain error is not empty")
	}
}
