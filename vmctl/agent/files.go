package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// WriteOption modifies a WriteFile request.
type WriteOption func(*agentproto.WriteFileRequest)

// WithParents makes WriteFile create missing parent directories (mode
// 0755), like mkdir -p.
func WithParents() WriteOption {
	return func(r *agentproto.WriteFileRequest) { r.Parents = true }
}

// WithOwner makes WriteFile give the file (and the directories
// WithParents creates) to the guest account owner, a name or numeric uid
// the guest looks up in /etc/passwd; "" keeps the agent's default user.
func WithOwner(owner string) WriteOption {
	return func(r *agentproto.WriteFileRequest) { r.Owner = owner }
}

// WriteFile streams r into the guest file at absolute path p, created or
// atomically replaced (temporary file, fsync, rename) with the permission
// bits of mode (the guest's umask does not apply). Memory use is constant.
// It returns once the guest confirmed the rename; when the guest fails
// early it returns that error after r's pending Read has returned.
//
// Errors: r's read error; *agentproto.Error with CodeNotFound (parent
// missing, see WithParents), CodePermission, CodeInvalid (relative path, p
// is a directory) or CodeIO; ErrDisconnected; ctx.Err().
func (c *Client) WriteFile(ctx context.Context, p string, r io.Reader, mode fs.FileMode, opts ...WriteOption) error {
	req := &agentproto.WriteFileRequest{Path: p, Mode: mode}
	for _, o := range opts {
		o(req)
	}
	o, err := c.open(ctx, "write "+p, &agentproto.Request{Op: agentproto.OpWriteFile, WriteFile: req})
	if err != nil {
		return err
	}
	defer o.close()

	var readErr, stalled error
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		buf := make([]byte, agentproto.ChunkSize)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if err := o.fw.WriteFrame(agentproto.FrameData, buf[:n]); err != nil {
					if errors.Is(err, ErrStalled) { // no answer will come: stop waiting for it
						stalled = err
						_ = o.st.SetReadDeadline(time.Unix(1, 0))
					}
					return // else the answer says why
				}
			}
			if err == io.EOF {
				_ = o.fw.WriteFrame(agentproto.FrameDataEnd, nil)
				return
			}
			if err != nil {
				readErr = err
				_ = o.st.Close() // the guest sees EOF and discards the file
				return
			}
		}
	}()
	var resp agentproto.WriteFileResponse
	err = o.fr.ReadJSON(agentproto.FrameResponse, &resp)
	if err != nil {
		_ = o.st.Close() // unblock the sender
	}
	<-sent
	if readErr != nil {
		return fmt.Errorf("agent: write %s: read source: %w", p, readErr)
	}
	if stalled != nil {
		return fmt.Errorf("agent: write %s: %w", p, stalled)
	}
	if err != nil {
		return o.err(err)
	}
	return nil
}

// ReadFile streams the guest's regular file at absolute path p into w,
// with constant memory. Bytes already written to w stay written when it
// fails midway.
//
// Errors: w's write error; *agentproto.Error with CodeNotFound,
// CodePermission, CodeInvalid (relative path, p is a directory) or CodeIO;
// ErrDisconnected; ctx.Err().
func (c *Client) ReadFile(ctx context.Context, p string, w io.Writer) error {
	o, err := c.open(ctx, "read "+p, &agentproto.Request{Op: agentproto.OpReadFile, Path: &agentproto.PathRequest{Path: p}})
	if err != nil {
		return err
	}
	defer o.close()
	for {
		t, b, err := o.fr.ReadFrame()
		if err != nil {
			return o.err(err)
		}
		switch t {
		case agentproto.FrameData:
			if _, err := w.Write(b); err != nil {
				return fmt.Errorf("agent: read %s: write destination: %w", p, err)
			}
		case agentproto.FrameDataEnd:
			return nil
		default:
			return o.err(agentproto.DecodeFrame(t, b, agentproto.FrameData, nil))
		}
	}
}

// Stat returns information about the guest path p (absolute), following
// symbolic links. Errors: *agentproto.Error with CodeNotFound,
// CodePermission, CodeInvalid or CodeIO; ErrDisconnected; ctx.Err().
func (c *Client) Stat(ctx context.Context, p string) (agentproto.FileInfo, error) {
	var fi agentproto.FileInfo
	err := c.call(ctx, "stat "+p, &agentproto.Request{Op: agentproto.OpStat, Path: &agentproto.PathRequest{Path: p}}, &fi)
	return fi, err
}

// List returns the entries of the guest directory p (absolute), sorted by
// name, without following symbolic links. Errors: as Stat, plus CodeNotFound
// when p is not a directory; ErrTooLarge when the guest sends more than
// MaxListEntries entries or MaxListBytes bytes of them.
func (c *Client) List(ctx context.Context, p string) ([]agentproto.FileInfo, error) {
	o, err := c.open(ctx, "list "+p, &agentproto.Request{Op: agentproto.OpList, Path: &agentproto.PathRequest{Path: p}})
	if err != nil {
		return nil, err
	}
	defer o.close()
	entries := []agentproto.FileInfo{}
	size := 0
	for {
		t, b, err := o.fr.ReadFrame()
		if err != nil {
			return nil, o.err(err)
		}
		switch t {
		case agentproto.FrameData:
			if size += len(b); size > MaxListBytes {
				return nil, fmt.Errorf("agent: list %s: %w", p, tooLarge(fmt.Sprintf("the guest sent %d bytes of entries of %s", size, p), size, MaxListBytes, "list a subdirectory"))
			}
			var batch []agentproto.FileInfo
			if err := json.Unmarshal(b, &batch); err != nil {
				return nil, o.err(fmt.Errorf("decode entries: %w", err))
			}
			if n := len(entries) + len(batch); n > MaxListEntries {
				return nil, fmt.Errorf("agent: list %s: %w", p, tooLarge(fmt.Sprintf("the guest sent %d entries of %s", n, p), n, MaxListEntries, "list a subdirectory"))
			}
			entries = append(entries, batch...)
		case agentproto.FrameDataEnd:
			return entries, nil
		default:
			return nil, o.err(agentproto.DecodeFrame(t, b, agentproto.FrameData, nil))
		}
	}
}

// Mkdir creates the guest directory p (absolute) with the permission bits
// of mode (0 means 0755; the umask does not apply). With parents it creates
// missing parents and succeeds when p already is a directory, like mkdir -p.
// Errors: *agentproto.Error with CodeExists (p exists, or is a non-directory
// with parents), CodeNotFound (parent missing without parents),
// CodePermission, CodeInvalid, CodeIO; ErrDisconnected; ctx.Err().
func (c *Client) Mkdir(ctx context.Context, req agentproto.MkdirRequest) error {
	return c.call(ctx, "mkdir "+req.Path, &agentproto.Request{Op: agentproto.OpMkdir, Mkdir: &req}, nil)
}

// Remove removes the guest path p (absolute; "/" is refused). A directory
// must be empty unless recursive is set, which removes it with its
// contents like rm -r. Errors: *agentproto.Error with CodeNotFound (p does
// not exist, also when recursive), CodeExists (directory not empty, as Go's
// errors.Is(ENOTEMPTY, fs.ErrExist)), CodeInvalid (p is "/"),
// CodePermission, CodeIO; ErrDisconnected; ctx.Err().
func (c *Client) Remove(ctx context.Context, p string, recursive bool) error {
	return c.call(ctx, "remove "+p, &agentproto.Request{
		Op: agentproto.OpRemove, Remove: &agentproto.RemoveRequest{Path: p, Recursive: recursive},
	}, nil)
}

// Move renames the guest path req.Source to req.Destination (rename(2):
// same filesystem, an existing file at the destination replaced) and
// returns the destination's info, a symbolic link not followed. Errors:
// *agentproto.Error with CodeNotFound (no source, or a missing parent of
// the destination without Parents), CodeExists (a non-empty directory at
// the destination), CodeInvalid (relative path, "/", across filesystems,
// a directory into itself, or an agent without OpMove: "unknown op"),
// CodePermission, CodeIO; ErrDisconnected; ctx.Err().
func (c *Client) Move(ctx context.Context, req agentproto.MoveRequest) (agentproto.FileInfo, error) {
	var fi agentproto.FileInfo
	err := c.call(ctx, "move "+req.Source, &agentproto.Request{Op: agentproto.OpMove, Move: &req}, &fi)
	return fi, err
}
