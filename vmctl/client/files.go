package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
)

// files holds the Client's calls on a sandbox's guest files: upload,
// download, stat, list, move, mkdir, remove, watch.
type files struct{ *transport }

// Upload streams r to the guest file path (absolute) of sandbox ref, which
// replaces it atomically, with permission perm (0 means 0644; setuid,
// setgid and sticky bits count) and, if parents, missing parent
// directories. The body is streamed (chunked unless r is a *bytes.Reader,
// *bytes.Buffer or *strings.Reader); nothing is held in memory whole.
func (c *files) Upload(ctx context.Context, ref, guestPath string, r io.Reader, perm fs.FileMode, parents bool) (api.FileInfo, error) {
	return c.UploadFile(ctx, ref, api.UploadRequest{Path: guestPath, Mode: perm, Parents: parents}, r)
}

// UploadFile is Upload with all of PUT /v1/sandboxes/{id}/files's
// parameters, req.Owner among them.
func (c *files) UploadFile(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
	q := url.Values{"path": {req.Path}}
	if req.Mode != 0 {
		q.Set("mode", api.FormatMode(req.Mode))
	}
	if req.Parents {
		q.Set("parents", "true")
	}
	if req.Owner != "" {
		q.Set("owner", req.Owner)
	}
	if r == nil {
		r = http.NoBody
	}
	u := c.resumable(q, "v1", "sandboxes", ref, "files")
	resp, err := c.do(ctx, http.MethodPut, u, api.ContentTypeOctetStream, r)
	if err != nil {
		return api.FileInfo{}, err
	}
	defer resp.Body.Close()
	var fi api.FileInfo
	if err := json.NewDecoder(resp.Body).Decode(&fi); err != nil {
		return api.FileInfo{}, fmt.Errorf("decoding the upload answer: %w", err)
	}
	return fi, nil
}

// Download streams the regular file guestPath of sandbox ref to w and
// returns its info (size, mode, modification time from the answer's
// headers). Errors: 404, 422 not_a_file; a write error of w; a download
// cut short (the file changed or the daemon failed mid-way).
func (c *files) Download(ctx context.Context, ref, guestPath string, w io.Writer) (api.FileInfo, error) {
	return c.DownloadTo(ctx, ref, guestPath, func(api.FileInfo) io.Writer { return w })
}

// DownloadTo is Download calling open with the file's info (Size is the
// answer's Content-Length) once the daemon answered, before the first
// byte, and streaming the content to the writer open returns; open is
// not called when the download fails before it began (404, 422), so a
// caller can still answer with an error of its own.
func (c *files) DownloadTo(ctx context.Context, ref, guestPath string, open func(api.FileInfo) io.Writer) (api.FileInfo, error) {
	u := c.resumable(url.Values{"path": {guestPath}}, "v1", "sandboxes", ref, "files")
	resp, err := c.do(ctx, http.MethodGet, u, "", nil)
	if err != nil {
		return api.FileInfo{}, err
	}
	defer resp.Body.Close()
	if err := checkType(resp, api.ContentTypeOctetStream); err != nil {
		return api.FileInfo{}, err
	}
	clean := path.Clean(guestPath)
	fi := api.FileInfo{
		Name: path.Base(clean),
		Path: clean,
		Type: api.FileRegular,
		Size: resp.ContentLength,
		Mode: resp.Header.Get(api.HeaderMode),
	}
	if t, err := time.Parse(time.RFC3339Nano, resp.Header.Get(api.HeaderModTime)); err == nil {
		fi.ModTime = t
	}
	n, err := io.Copy(open(fi), resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return fi, ctx.Err()
		}
		return fi, fmt.Errorf("downloading %s: cut after %d of %d bytes: %w", guestPath, n, resp.ContentLength, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return fi, fmt.Errorf("downloading %s: got %d of %d bytes", guestPath, n, resp.ContentLength)
	}
	fi.Size = n
	return fi, nil
}

// Stat describes guestPath in sandbox ref. Errors: 404.
func (c *files) Stat(ctx context.Context, ref, guestPath string) (api.FileInfo, error) {
	var fi api.FileInfo
	err := c.call(ctx, http.MethodGet, c.resumable(url.Values{"path": {guestPath}}, "v1", "sandboxes", ref, "files", "stat"), nil, &fi)
	return fi, err
}

// List lists the directory guestPath of sandbox ref, sorted by name.
// Errors: 404, 422 not_a_directory.
func (c *files) List(ctx context.Context, ref, guestPath string) ([]api.FileInfo, error) {
	return c.ListDepth(ctx, ref, guestPath, 1)
}

// ListDepth is List down to depth levels: with depth > 1 each
// subdirectory's entries follow it (symbolic links are not followed).
// depth is 1 to api.MaxListDepth.
func (c *files) ListDepth(ctx context.Context, ref, guestPath string, depth int) ([]api.FileInfo, error) {
	q := url.Values{"path": {guestPath}}
	if depth > 1 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var list api.FileList
	err := c.call(ctx, http.MethodGet, c.resumable(q, "v1", "sandboxes", ref, "files", "list"), nil, &list)
	return list.Files, err
}

// Move renames req.Source to req.Destination in sandbox ref and returns
// the destination's info. Errors: 404, 409 already_exists, 400.
func (c *files) Move(ctx context.Context, ref string, req api.MoveRequest) (api.FileInfo, error) {
	var fi api.FileInfo
	err := c.call(ctx, http.MethodPost, c.resumable(nil, "v1", "sandboxes", ref, "files", "move"), req, &fi)
	return fi, err
}

// Mkdir creates the directory req.Path in sandbox ref.
func (c *files) Mkdir(ctx context.Context, ref string, req api.MkdirRequest) error {
	return c.call(ctx, http.MethodPost, c.resumable(nil, "v1", "sandboxes", ref, "files", "mkdir"), req, nil)
}

// RemoveFile removes guestPath from sandbox ref, a directory's content too
// when recursive.
func (c *files) RemoveFile(ctx context.Context, ref, guestPath string, recursive bool) error {
	q := url.Values{"path": {guestPath}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.call(ctx, http.MethodDelete, c.resumable(q, "v1", "sandboxes", ref, "files"), nil, nil)
}
