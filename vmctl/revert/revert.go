// Package revert is a LIFO list of undo steps for multi-step setup: each
// step that succeeds adds its undo; when a later step fails, Fail runs the
// undos newest first and joins their errors, so nothing half-made survives
// (lxc/incus shared/revert is the model; e2b's sandbox cleanup list joins
// the errors the same way). Once the setup succeeded, Success forgets the
// undos and the caller owns what was made.
//
//	r := revert.New()
//	defer r.OnError(ctx, &err)
//	if err := makeA(); err != nil { return err }
//	r.Add("a", undoA)
//	…
//	r.Success()
//
// A List is not safe for concurrent use.
package revert

import (
	"context"
	"errors"
	"fmt"
)

// Hook undoes one step. Its ctx is never cancelled with the caller's (see
// List.Fail).
type Hook func(ctx context.Context) error

// List is the undo list of one setup; the zero value is ready to use.
type List struct {
	steps []step
}

type step struct {
	name string
	undo Hook
}

// New returns an empty List.
func New() *List { return &List{} }

// Add registers undo for the step named name, which just succeeded. The
// name appears in Fail's errors ("undo <name>: …").
func (l *List) Add(name string, undo Hook) {
	l.steps = append(l.steps, step{name, undo})
}

// Fail runs every registered undo, newest first, under
// context.WithoutCancel(ctx) (teardown must finish after a Ctrl-C or a
// client's disconnect), and empties the list. It returns the undos' errors
// joined, each as "undo <name>: <err>"; nil when all succeeded or nothing
// was registered (also after Success).
func (l *List) Fail(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for i := len(l.steps) - 1; i >= 0; i-- {
		s := l.steps[i]
		if err := s.undo(ctx); err != nil {
			errs = append(errs, fmt.Errorf("undo %s: %w", s.name, err))
		}
	}
	l.steps = nil
	return errors.Join(errs...)
}

// Unwind runs every registered undo, newest first, under ctx as given
// (not WithoutCancel: ctx's deadline bounds each step, as a shutdown
// timeout bounds a service's teardown), and empties the list. It returns
// the undos' errors joined as they returned them (a shutdown's errors are
// its steps' own, not "undo" failures); nil when all succeeded. It is the
// normal end of what a setup made and kept on its list (a service that
// runs until Unwind), where Fail is its end on an error.
func (l *List) Unwind(ctx context.Context) error {
	var errs []error
	for i := len(l.steps) - 1; i >= 0; i-- {
		if err := l.steps[i].undo(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	l.steps = nil
	return errors.Join(errs...)
}

// Success forgets the registered undos: the setup succeeded and its
// caller owns what was made. A later Fail does nothing.
func (l *List) Success() { l.steps = nil }

// OnError runs Fail when *errp is not nil and joins Fail's errors into
// *errp; meant for a defer in a function with a named error result.
func (l *List) OnError(ctx context.Context, errp *error) {
	if *errp == nil {
		return
	}
	if err := l.Fail(ctx); err != nil {
		*errp = errors.Join(*errp, err)
	}
}
