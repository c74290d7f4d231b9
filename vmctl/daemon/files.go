package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"time"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// filesService is the daemon's file operations on a sandbox's guest:
// transfers, listings, moves, directories, removals (files.go), watches
// (watch.go) and the console log; each is one busy, audited action.
type filesService struct{ *core }

// fileOp runs op on b's sandbox as one busy (sandbox.Busy), audited
// action on path; op's errors come explained from the sandbox's file
// methods (ErrNotRunning when it stopped since running looked).
func (s *filesService) fileOp(ctx context.Context, ref, action string, args map[string]any, op func(sb *sandbox.Sandbox) (in, out int64, err error)) error {
	b, err := s.running(ctx, ref)
	if err != nil {
		return err
	}
	done := b.sb.Busy()
	s.inflight.Add(1)
	defer func() {
		done()
		s.inflight.Done()
	}()
	start := time.Now()
	in, out, err := op(b.sb)
	e := s.requestEntry(ctx, b.sb.ID, action, args, start, err)
	e.BytesIn, e.BytesOut = in, out
	if err != nil {
		s.appendAudit(e)
		return err
	}
	s.appendAudit(e)
	s.metrics.bytes.WithLabelValues("in", "file").Add(float64(in))
	s.metrics.bytes.WithLabelValues("out", "file").Add(float64(out))
	return nil
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Upload implements backend.Backend: the guest agent writes the file
// atomically (temporary file, fsync, rename).
func (s *filesService) Upload(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
	ctx, err := s.policyFile(ctx, ref, audit.ActionUpload, req.Path, "", &req.Owner) // policy.go
	if err != nil {
		return api.FileInfo{}, err
	}
	var info api.FileInfo
	p, perm := req.Path, req.Mode
	if perm == 0 {
		perm = 0o644
	}
	args := map[string]any{"path": p, "mode": api.FormatMode(perm), "parents": req.Parents}
	if req.Owner != "" {
		args["owner"] = req.Owner
	}
	err = s.fileOp(ctx, ref, audit.ActionUpload, args, func(sb *sandbox.Sandbox) (int64, int64, error) {
		cr := &countReader{r: r}
		if err := sb.WriteFile(ctx, p, cr, perm, req.Parents, req.Owner); err != nil {
			return cr.n, 0, err
		}
		fi, err := sb.Stat(ctx, p)
		if err != nil {
			return cr.n, 0, err
		}
		info = fileInfo(p, fi)
		return cr.n, 0, nil
	})
	return info, err
}

// Download implements backend.Backend.
func (s *filesService) Download(ctx context.Context, ref, p string, open func(api.FileInfo) io.Writer) error {
	ctx, err := s.policyFile(ctx, ref, audit.ActionDownload, p, "", nil) // policy.go
	if err != nil {
		return err
	}
	return s.fileOp(ctx, ref, audit.ActionDownload, map[string]any{"path": p}, func(sb *sandbox.Sandbox) (int64, int64, error) {
		fi, err := sb.Stat(ctx, p)
		if err != nil {
			return 0, 0, err
		}
		if fi.Type != agentproto.TypeFile {
			return 0, 0, errNotAFile.WithMessage(fmt.Sprintf("%s is a %s, not a regular file: download copies single files (use `agentbox exec SANDBOX -- tar -C DIR -c .` for directories)", p, fi.Type))
		}
		w := &countWriter{w: open(fileInfo(p, fi))}
		err = sb.ReadFile(ctx, p, w)
		return 0, w.n, err
	})
}

// Stat implements backend.Backend.
func (s *filesService) Stat(ctx context.Context, ref, p string) (api.FileInfo, error) {
	ctx, err := s.policyFile(ctx, ref, audit.ActionStat, p, "", nil) // policy.go
	if err != nil {
		return api.FileInfo{}, err
	}
	var info api.FileInfo
	err = s.fileOp(ctx, ref, audit.ActionStat, map[string]any{"path": p}, func(sb *sandbox.Sandbox) (int64, int64, error) {
		fi, err := sb.Stat(ctx, p)
		info = fileInfo(p, fi)
		return 0, 0, err
	})
	return info, err
}

// List implements backend.Backend: one agent listing per directory,
// depth first, so a directory's entries follow it. A walk stops with
// agent.ErrTooLarge (413 too_large) as soon as it holds more than
// api.MaxListEntries entries, so a guest that fakes a deep or wide tree
// costs the daemon at most that many.
func (s *filesService) List(ctx context.Context, ref, p string, depth int) ([]api.FileInfo, error) {
	ctx, err := s.policyFile(ctx, ref, audit.ActionList, p, "", nil) // policy.go
	if err != nil {
		return nil, err
	}
	out := []api.FileInfo{}
	args := map[string]any{"path": p}
	if depth > 1 {
		args["depth"] = depth
	}
	err = s.fileOp(ctx, ref, audit.ActionList, args, func(sb *sandbox.Sandbox) (int64, int64, error) {
		fi, err := sb.Stat(ctx, p)
		if err != nil {
			return 0, 0, err
		}
		if fi.Type != agentproto.TypeDir {
			return 0, 0, errNotADirectory.WithMessage(fmt.Sprintf("%s is a %s, not a directory: use stat", p, fi.Type))
		}
		out, err = walkList(ctx, sb.ReadDir, p, depth)
		return 0, 0, err
	})
	return out, err
}

// walkList lists directory p and, to depth levels, its subdirectories
// with readDir (a sandbox's ReadDir), depth first, so that a directory's
// entries follow it. It stops with agent.ErrTooLarge (413 too_large,
// details limit and count) as soon as the entries would be more than
// api.MaxListEntries: a guest that fakes a wide or deep tree costs at most
// that many entries and one listing more.
func walkList(ctx context.Context, readDir func(context.Context, string) ([]agentproto.FileInfo, error), p string, depth int) ([]api.FileInfo, error) {
	out := []api.FileInfo{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		entries, err := readDir(ctx, dir)
		if err != nil {
			return err
		}
		if n := len(out) + len(entries); n > api.MaxListEntries {
			msg := fmt.Sprintf("listing %s to depth %d gives more than %d entries, the limit (%d with %s): list a subdirectory, or with a smaller depth", p, depth, api.MaxListEntries, n, dir)
			return errdefs.WithDetails(agent.ErrTooLarge.WithMessage(msg), map[string]any{"limit": api.MaxListEntries, "count": n})
		}
		for _, e := range entries {
			ep := path.Join(dir, e.Name)
			out = append(out, fileInfo(ep, e))
			if e.Type != agentproto.TypeDir || level >= depth {
				continue
			}
			// A directory removed or replaced since it was listed
			// is skipped, as a walk of a changing tree does.
			if err := walk(ep, level+1); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return err
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		return nil, err
	}
	return out, nil
}

// Move implements backend.Backend.
func (s *filesService) Move(ctx context.Context, ref string, req api.MoveRequest) (api.FileInfo, error) {
	ctx, err := s.policyFile(ctx, ref, audit.ActionMove, req.Source, req.Destination, &req.Owner) // policy.go
	if err != nil {
		return api.FileInfo{}, err
	}
	var info api.FileInfo
	args := map[string]any{"source": req.Source, "destination": req.Destination, "parents": req.Parents}
	if req.Owner != "" {
		args["owner"] = req.Owner
	}
	err = s.fileOp(ctx, ref, audit.ActionMove, args, func(sb *sandbox.Sandbox) (int64, int64, error) {
		fi, err := sb.Move(ctx, agentproto.MoveRequest{Source: req.Source, Destination: req.Destination, Parents: req.Parents, Owner: req.Owner})
		info = fileInfo(req.Destination, fi)
		return 0, 0, err
	})
	return info, err
}

// Mkdir implements backend.Backend.
func (s *filesService) Mkdir(ctx context.Context, ref string, req api.MkdirRequest) error {
	ctx, err := s.policyFile(ctx, ref, audit.ActionMkdir, req.Path, "", &req.Owner) // policy.go
	if err != nil {
		return err
	}
	perm := fs.FileMode(0o755)
	if req.Mode != "" {
		m, err := api.ParseMode(req.Mode)
		if err != nil {
			return err
		}
		perm = m
	}
	args := map[string]any{"path": req.Path, "mode": api.FormatMode(perm), "parents": req.Parents}
	if req.Owner != "" {
		args["owner"] = req.Owner
	}
	return s.fileOp(ctx, ref, audit.ActionMkdir, args, func(sb *sandbox.Sandbox) (int64, int64, error) {
		return 0, 0, sb.Mkdir(ctx, agentproto.MkdirRequest{Path: req.Path, Mode: perm, Parents: req.Parents, Owner: req.Owner})
	})
}

// RemoveFile implements backend.Backend.
func (s *filesService) RemoveFile(ctx context.Context, ref, p string, recursive bool) error {
	if p == "/" {
		return errdefs.ErrInvalidArgument.WithMessage("refusing to remove / : remove the sandbox instead")
	}
	ctx, err := s.policyFile(ctx, ref, audit.ActionDelete, p, "", nil) // policy.go
	if err != nil {
		return err
	}
	return s.fileOp(ctx, ref, audit.ActionDelete, map[string]any{"path": p, "recursive": recursive}, func(sb *sandbox.Sandbox) (int64, int64, error) {
		return 0, 0, sb.RemoveFile(ctx, p, recursive)
	})
}

// fileInfo converts the agent's file info.
func fileInfo(p string, fi agentproto.FileInfo) api.FileInfo {
	t := api.FileOther
	switch fi.Type {
	case agentproto.TypeFile:
		t = api.FileRegular
	case agentproto.TypeDir:
		t = api.FileDir
	case agentproto.TypeSymlink:
		t = api.FileSymlink
	}
	return api.FileInfo{Name: path.Base(p), Path: p, Type: t, Size: fi.Size,
		Mode: api.FormatMode(fi.Mode), ModTime: time.Unix(0, fi.ModTimeNs).UTC(),
		Owner: fi.Owner, Group: fi.Group, LinkTarget: fi.LinkTarget}
}

// Console implements backend.Backend: the serial console log, also of
// stopped and failed sandboxes. The log is opened as
// sandbox.OpenSandboxFile does (no symlink followed, a regular file of one
// link): errors wrap sandbox.ErrUnsafeFile otherwise.
func (s *filesService) Console(ctx context.Context, ref string, tail int64, w io.Writer) error {
	sb, err := s.get(ctx, ref)
	if err != nil {
		return err
	}
	f, _, err := sandbox.OpenSandboxFile(sb.ConsoleLog, os.O_RDONLY, nil)
	if err != nil {
		if os.IsNotExist(err) {
			return nil // nothing printed yet
		}
		return err
	}
	defer f.Close()
	if tail > 0 {
		if fi, err := f.Stat(); err == nil && fi.Size() > tail {
			f.Seek(fi.Size()-tail, io.SeekStart)
		}
	}
	_, err = io.Copy(w, f)
	return err
}
