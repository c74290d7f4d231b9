package sandbox

import (
	"context"
	"errors"
	"fmt"
)

// revert is a LIFO list of undo steps for multi-step creation: when step N
// fails, steps N-1…1 are undone in reverse order and their errors joined, so
// nothing half-made survives (compare lxc/incus shared/revert and e2b's
// sandbox cleanup list).
type revert struct {
	steps []revertStep
}

type revertStep struct {
	name string
	fn   func(ctx context.Context) error
}

// add registers the undo of a step that just succeeded.
func (r *revert) add(name string, fn func(ctx context.Context) error) {
	r.steps = append(r.steps, revertStep{name, fn})
}

// run undoes every registered step, newest first, under a context that is
// not cancelled with the caller's (teardown must finish even after Ctrl-C).
func (r *revert) run(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for i := len(r.steps) - 1; i >= 0; i-- {
		if err := r.steps[i].fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("undo %s: %w", r.steps[i].name, err))
		}
	}
	r.steps = nil
	return errors.Join(errs...)
}

// release forgets the steps: creation succeeded and the sandbox owns them.
func (r *revert) release() { r.steps = nil }
