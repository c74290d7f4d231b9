package envd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
	fspb "github.com/agentbox/agentbox/vmctl/envd/gen/filesystem"
	"github.com/agentbox/agentbox/vmctl/envd/gen/filesystem/filesystemconnect"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// filesystemService is envd's filesystem.Filesystem over the sandbox
// service. The SDK calls Stat, MakeDir, Move, ListDir, Remove and the
// streaming WatchDir; the non-streaming watcher (CreateWatcher,
// GetWatcherEvents, RemoveWatcher), which the SDK never calls, answers
// unimplemented.
type filesystemService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	c    *client.Client
	opts Options
}

var _ filesystemconnect.FilesystemHandler = (*filesystemService)(nil)

// mountFilesystem registers the service on mux.
func mountFilesystem(mux *http.ServeMux, c *client.Client, o Options) {
	mux.Handle(filesystemconnect.NewFilesystemHandler(&filesystemService{c: c, opts: o}, handlerOptions...))
}

// resolver returns the path resolver of a request (its user from the
// Authorization header).
func (s *filesystemService) resolver(ctx context.Context, h http.Header) (*resolver, error) {
	user, err := rpcUser(h, s.opts.DefaultUser)
	if err != nil {
		return nil, err
	}
	return &resolver{c: s.c, sb: SandboxFrom(ctx), user: user}, nil
}

// target returns the path resolver of a request and name made absolute
// for its user; an error of the path is already a connect error.
func (s *filesystemService) target(ctx context.Context, h http.Header, name string) (*resolver, string, error) {
	r, err := s.resolver(ctx, h)
	if err != nil {
		return nil, "", err
	}
	p, err := r.abs(ctx, name)
	if err != nil {
		return nil, "", connectError(err)
	}
	return r, p, nil
}

// Stat implements filesystem.Filesystem: the entry of a path; a symbolic
// link is followed for type, mode and size, and named by symlinkTarget.
func (s *filesystemService) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	r, p, err := s.target(ctx, req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	fi, err := s.c.Stat(ctx, r.sb, p)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: entryInfo(fi)}), nil
}

// ListDir implements filesystem.Filesystem: the entries below a directory
// down to depth levels (0 means 1), symbolic links not followed.
func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	r, p, err := s.target(ctx, req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	if depth > api.MaxListDepth {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("depth %d is above the limit of %d levels", depth, api.MaxListDepth))
	}
	list, err := s.c.ListDepth(ctx, r.sb, p, depth)
	if api.HasCode(err, api.CodeNotADirectory) {
		return nil, errorf(connect.CodeInvalidArgument, "%s", api.ErrorFrom(err).Message) // as envd answers it
	}
	if err != nil {
		return nil, connectError(err)
	}
	out := &fspb.ListDirResponse{Entries: make([]*fspb.EntryInfo, 0, len(list))}
	for _, fi := range list {
		out.Entries = append(out.Entries, entryInfo(fi))
	}
	return connect.NewResponse(out), nil
}

// MakeDir implements filesystem.Filesystem as envd does: an existing
// directory is already_exists (the SDK's makeDir answers false), an
// existing non-directory invalid_argument; otherwise the directory and
// its missing parents are made (0755), owned by the user.
func (s *filesystemService) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	r, p, err := s.target(ctx, req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	fi, err := s.c.Stat(ctx, r.sb, p)
	switch {
	case err == nil && fi.Type == api.FileDir:
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory %s already exists", p))
	case err == nil:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s already exists and is a %s, not a directory", p, fi.Type))
	case !errors.Is(err, errdefs.ErrNotFound):
		return nil, connectError(err)
	}
	if err := s.c.Mkdir(ctx, r.sb, api.MkdirRequest{Path: p, Mode: "0755", Parents: true, Owner: r.user}); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: &fspb.EntryInfo{
		Name: path.Base(p), Type: fspb.FileType_FILE_TYPE_DIRECTORY, Path: p,
	}}), nil
}

// Move implements filesystem.Filesystem: a rename, the destination's
// missing parents made for the user; the answer is the destination's
// entry.
func (s *filesystemService) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	r, src, err := s.target(ctx, req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := r.abs(ctx, req.Msg.GetDestination())
	if err != nil {
		return nil, connectError(err)
	}
	fi, err := s.c.Move(ctx, r.sb, api.MoveRequest{Source: src, Destination: dst, Parents: true, Owner: r.user})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: entryInfo(fi)}), nil
}

// Remove implements filesystem.Filesystem as envd's os.RemoveAll: a
// directory with its contents, and a missing path is no error.
func (s *filesystemService) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	r, p, err := s.target(ctx, req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := s.c.RemoveFile(ctx, r.sb, p, true); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, connectError(err)
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

// WatchDir implements filesystem.Filesystem: a start event once the
// guest's watch is in place (a change after it is reported), then one
// event per change, named relative to the watched directory, in the
// guest's order, and keepalive events while idle. A rename within the
// tree is RENAME of the old name then CREATE of the new one, as envd's
// inotify watcher reports it. The stream ends with the watched
// directory's own removal, the client, or its deadline.
func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	r, dir, err := s.target(ctx, req.Header(), req.Msg.GetPath())
	if err != nil {
		return err
	}
	fi, err := s.c.Stat(ctx, r.sb, dir)
	if err != nil {
		return connectError(err)
	}
	if fi.Type != api.FileDir {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is a %s, not a directory: watch a directory", dir, fi.Type))
	}
	withEntry := req.Msg.GetIncludeEntry()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex // Send is not safe for concurrent use
		sendErr error      // the first failed send; it ends the watch
	)
	send := func(m *fspb.WatchDirResponse) error {
		mu.Lock()
		defer mu.Unlock()
		if sendErr != nil {
			return sendErr
		}
		if sendErr = stream.Send(m); sendErr != nil {
			cancel()
		}
		return sendErr
	}
	started := make(chan struct{})
	ready := func() {
		_ = send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}})
		close(started)
	}
	stop := keepalive(ctx, keepaliveInterval(req.Header()), started, func() error {
		return send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}})
	})
	defer stop() // no send after the handler returned
	emit := func(ev api.WatchEvent) error {
		for _, e := range watchEvents(dir, ev, withEntry) {
			if err := send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: e}}); err != nil {
				return err
			}
		}
		return nil
	}
	err = s.c.Watch(ctx, r.sb, dir, req.Msg.GetRecursive(), ready, emit)
	stop()
	mu.Lock()
	defer mu.Unlock()
	if sendErr != nil {
		return sendErr // the client went: nobody reads the answer
	}
	return connectError(err)
}

// watchEvents maps one event of the sandbox service's watch to envd's
// (none for OVERFLOW, which envd has no event for). The guest agent
// writes an upload to a temporary file beside it and renames that onto
// the file (agentproto.UploadTempPattern): the temporary file's own
// events are dropped, and its rename onto NAME is CREATE then WRITE of
// NAME, what E2B's envd watcher reports of a write (it opens NAME with
// O_CREATE and writes it); onto another name, CREATE of that name.
func watchEvents(dir string, ev api.WatchEvent, withEntry bool) []*fspb.FilesystemEvent {
	event := func(t fspb.EventType, p string, info *api.FileInfo) *fspb.FilesystemEvent {
		e := &fspb.FilesystemEvent{Name: relName(dir, p), Type: t}
		if withEntry && info != nil {
			fi := *info
			fi.Path, fi.Name = p, path.Base(p)
			e.Entry = entryInfo(fi)
		}
		return e
	}
	if target, ok := agentproto.UploadTempTarget(path.Base(ev.Path)); ok {
		if ev.Op != api.WatchRename || ev.To == "" {
			return nil
		}
		out := []*fspb.FilesystemEvent{event(fspb.EventType_EVENT_TYPE_CREATE, ev.To, ev.Info)}
		if ev.To == path.Join(path.Dir(ev.Path), target) {
			out = append(out, event(fspb.EventType_EVENT_TYPE_WRITE, ev.To, ev.Info))
		}
		return out
	}
	switch ev.Op {
	case api.WatchCreate:
		return []*fspb.FilesystemEvent{event(fspb.EventType_EVENT_TYPE_CREATE, ev.Path, ev.Info)}
	case api.WatchWrite:
		return []*fspb.FilesystemEvent{event(fspb.EventType_EVENT_TYPE_WRITE, ev.Path, ev.Info)}
	case api.WatchRemove:
		return []*fspb.FilesystemEvent{event(fspb.EventType_EVENT_TYPE_REMOVE, ev.Path, nil)}
	case api.WatchChmod:
		return []*fspb.FilesystemEvent{event(fspb.EventType_EVENT_TYPE_CHMOD, ev.Path, ev.Info)}
	case api.WatchRename:
		out := []*fspb.FilesystemEvent{event(fspb.EventType_EVENT_TYPE_RENAME, ev.Path, nil)}
		if ev.To != "" {
			out = append(out, event(fspb.EventType_EVENT_TYPE_CREATE, ev.To, ev.Info))
		}
		return out
	}
	return nil
}

// relName is p relative to dir (envd's event names), p itself when it is
// not below dir.
func relName(dir, p string) string {
	if p == dir {
		return "."
	}
	if rel, ok := strings.CutPrefix(p, strings.TrimSuffix(dir, "/")+"/"); ok {
		return rel
	}
	return p
}

// entryInfo is envd's EntryInfo of a file of the sandbox service: mode
// is the permission bits, permissions Go's fs.FileMode string as envd
// prints it (e.g. "-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx" for a link).
func entryInfo(fi api.FileInfo) *fspb.EntryInfo {
	perm, _ := api.ParseMode(fi.Mode)
	mode := perm
	t := fspb.FileType_FILE_TYPE_UNSPECIFIED
	switch fi.Type {
	case api.FileRegular:
		t = fspb.FileType_FILE_TYPE_FILE
	case api.FileDir:
		t, mode = fspb.FileType_FILE_TYPE_DIRECTORY, mode|fs.ModeDir
	case api.FileSymlink:
		t, mode = fspb.FileType_FILE_TYPE_SYMLINK, mode|fs.ModeSymlink
	}
	if fi.LinkTarget != "" && fi.Type != api.FileSymlink {
		mode = fs.ModeSymlink | 0o777 // a followed link: its own mode
	}
	e := &fspb.EntryInfo{
		Name:        fi.Name,
		Type:        t,
		Path:        fi.Path,
		Size:        fi.Size,
		Mode:        uint32(perm.Perm()),
		Permissions: mode.String(),
		Owner:       fi.Owner,
		Group:       fi.Group,
	}
	if !fi.ModTime.IsZero() {
		e.ModifiedTime = timestamppb.New(fi.ModTime)
	}
	if fi.LinkTarget != "" {
		target := fi.LinkTarget
		e.SymlinkTarget = &target
	}
	return e
}
