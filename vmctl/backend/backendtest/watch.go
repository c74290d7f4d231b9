package backendtest

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

var _ backend.WatchBackend = (*Fake)(nil)

// Watch implements backend.WatchBackend; by default the watch is ready
// at once and sends a CREATE of path+"/a.txt" (with its info), a RENAME
// of it to path+"/b.txt", an OVERFLOW and the REMOVE of path, then ends.
func (b *Fake) Watch(ctx context.Context, ref, path string, recursive bool, ready func() error, emit func(api.WatchEvent) error) error {
	b.record("Watch", ref)
	if b.WatchFn != nil {
		return b.WatchFn(ctx, ref, path, recursive, ready, emit)
	}
	if err := ready(); err != nil {
		return err
	}
	a, bb := File(path+"/a.txt", 0), File(path+"/b.txt", 0)
	for _, ev := range []api.WatchEvent{
		{Op: api.WatchCreate, Path: a.Path, Info: &a, Time: Epoch},
		{Op: api.WatchRename, Path: a.Path, To: bb.Path, Info: &bb, Time: Epoch},
		{Op: api.WatchOverflow, Path: path, Time: Epoch},
		{Op: api.WatchRemove, Path: path, Time: Epoch},
	} {
		if err := emit(ev); err != nil {
			return err
		}
	}
	return nil
}
