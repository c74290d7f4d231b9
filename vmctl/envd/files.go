package envd

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

// files serves envd's plain HTTP routes: GET and POST /files, GET /health.
type files struct {
	c    *client.Client
	opts Options
}

// uploadEntry is an element of POST /files's answer (envd's EntryInfo of
// its OpenAPI document; the SDK's WriteInfo).
type uploadEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// health answers GET /health: 204 while the sandbox runs, 502 when it
// does not (the SDK's health check reads 502 as "the sandbox is gone").
func (f *files) health(w http.ResponseWriter, r *http.Request) {
	sb, err := f.c.GetSandbox(r.Context(), SandboxFrom(r.Context()))
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	if sb.State != api.StateRunning {
		writeHTTPStatus(w, http.StatusBadGateway, fmt.Sprintf("sandbox %s is %s", sb.ID, sb.State))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// user is the query's username (envd's /files routes take the user
// there), else the default user.
func (f *files) user(r *http.Request) (string, error) {
	u := r.URL.Query().Get("username")
	if u == "" {
		return f.opts.DefaultUser, nil
	}
	return u, api.CheckOwner("username", u)
}

// download answers GET /files?path=&username=: the file's bytes as
// application/octet-stream, streamed from the guest; 404 in envd's
// error shape when it is missing (the SDK's FileNotFoundError), 400 for a
// directory.
func (f *files) download(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	user, err := f.user(r)
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	res := &resolver{c: f.c, sb: SandboxFrom(ctx), user: user}
	p, err := res.abs(ctx, r.URL.Query().Get("path"))
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	started := false
	_, err = f.c.DownloadTo(ctx, res.sb, p, func(fi api.FileInfo) io.Writer {
		started = true
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		if fi.Size >= 0 {
			h.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
		}
		if !fi.ModTime.IsZero() {
			h.Set("Last-Modified", fi.ModTime.UTC().Format(http.TimeFormat))
		}
		w.WriteHeader(http.StatusOK)
		return w
	})
	switch {
	case err == nil:
	case !started:
		writeHTTPError(w, downloadError(p, err))
	default:
		// Cut short after the status went out: abort the connection so
		// the client sees a truncated body, never a short file.
		panic(http.ErrAbortHandler)
	}
}

// downloadError is err of a download of p with a message for an E2B
// user (same status and code, so it maps through the one error table):
// a missing file is "file P not found", without the layers of the
// service and guest agent the message went through; a directory or
// special file points at files.list and commands.run with tar rather
// than at the agentbox CLI. Other errors are err.
func downloadError(p string, err error) error {
	ae := api.ErrorFrom(err)
	switch ae.Code {
	case api.CodeNotFound:
		return api.Errorf(ae.Status, ae.Code, "file %s not found", p)
	case api.CodeNotAFile:
		return api.Errorf(ae.Status, ae.Code,
			"%s is not a regular file: files.read reads one file; list a directory with files.list('%s'), or archive it with commands.run('tar -C %s -c .')", p, p, p)
	}
	return err
}

// upload answers POST /files: multipart/form-data (every part named
// "file"; its filename is the destination unless the path parameter
// gives one) or application/octet-stream (envd 0.5.7: the body is the
// file at path), optionally gzip-encoded. Each file is streamed to the
// guest, written atomically with mode 0644, its missing parents made,
// owned by the user. The answer is 200 with one entry per file.
func (f *files) upload(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	user, err := f.user(r)
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	res := &resolver{c: f.c, sb: SandboxFrom(ctx), user: user}
	body := io.Reader(r.Body)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			writeHTTPStatus(w, http.StatusBadRequest, "the gzip-encoded body does not start as gzip: "+err.Error())
			return
		}
		defer gz.Close()
		body = gz
	default:
		writeHTTPStatus(w, http.StatusBadRequest, fmt.Sprintf("Content-Encoding %q is not supported: send gzip or none", enc))
		return
	}
	qpath := r.URL.Query().Get("path")
	put := func(dst string, src io.Reader) (uploadEntry, error) {
		p, err := res.abs(ctx, dst)
		if err != nil {
			return uploadEntry{}, err
		}
		fi, err := f.c.UploadFile(ctx, res.sb, api.UploadRequest{Path: p, Mode: 0o644, Parents: true, Owner: user}, src)
		if err != nil {
			return uploadEntry{}, err
		}
		return uploadEntry{Name: path.Base(fi.Path), Type: "file", Path: fi.Path}, nil
	}
	media, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []uploadEntry
	switch {
	case media == "application/octet-stream":
		if qpath == "" {
			writeHTTPStatus(w, http.StatusBadRequest, "an application/octet-stream upload needs the path query parameter")
			return
		}
		e, err := put(qpath, body)
		if err != nil {
			writeHTTPError(w, err)
			return
		}
		out = append(out, e)
	case strings.HasPrefix(media, "multipart/"):
		if params["boundary"] == "" {
			writeHTTPStatus(w, http.StatusBadRequest, "the multipart body has no boundary parameter")
			return
		}
		mr := multipart.NewReader(body, params["boundary"])
		seen := map[string]bool{}
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeHTTPStatus(w, http.StatusBadRequest, "reading the multipart body: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			dst := qpath
			if dst == "" {
				dst = partFilename(part)
			}
			if dst == "" {
				writeHTTPStatus(w, http.StatusBadRequest, "a multipart file part has no filename and there is no path parameter: name the destination")
				return
			}
			if seen[dst] {
				writeHTTPStatus(w, http.StatusBadRequest, fmt.Sprintf("the upload names %s twice: one file per path", api.QuoteShort(dst)))
				return
			}
			seen[dst] = true
			e, err := put(dst, part)
			part.Close()
			if err != nil {
				writeHTTPError(w, err)
				return
			}
			out = append(out, e)
		}
	default:
		writeHTTPStatus(w, http.StatusBadRequest, fmt.Sprintf("unsupported content type %q: send multipart/form-data or application/octet-stream", r.Header.Get("Content-Type")))
		return
	}
	if len(out) == 0 {
		writeHTTPStatus(w, http.StatusBadRequest, `the upload holds no part named "file"`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// partFilename is the filename of a multipart part's
// Content-Disposition as sent, with its directories (Part.FileName keeps
// only the base name; envd keeps the path, which is the destination).
func partFilename(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// mountFiles registers /files and /health on mux.
func mountFiles(mux *http.ServeMux, c *client.Client, o Options) {
	f := &files{c: c, opts: o}
	mux.HandleFunc("GET /files", f.download)
	mux.HandleFunc("POST /files", f.upload)
	mux.HandleFunc("GET /health", f.health)
}

// httpStatus is the status envd's plain HTTP routes (/files) answer for
// an error of the sandbox service: the API's own, except that what envd
// calls a bad request (a directory downloaded, a path that is not a file)
// is 400, a sandbox that stopped is 502 (the SDK's "sandbox timed out"),
// and a rate limit stays 429.
func httpStatus(e *api.Error) int {
	switch {
	case e.Status == http.StatusUnprocessableEntity:
		return http.StatusBadRequest
	case e.Code == api.CodeNotRunning, e.Code == api.CodeGuestDied:
		return http.StatusBadGateway
	case e.Status == 0:
		return http.StatusInternalServerError
	}
	return e.Status
}

// envdError is the JSON body of envd's plain HTTP errors (its OpenAPI
// Error schema: {"code": HTTP status, "message"}); the SDK reads message
// and maps the status (404 on /files → FileNotFoundError).
type envdError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeHTTPError answers err (mapped through api.ErrorFrom) in envd's
// error shape.
func writeHTTPError(w http.ResponseWriter, err error) {
	e := api.ErrorFrom(err)
	writeHTTPStatus(w, httpStatus(e), e.Message)
}

// writeHTTPStatus answers status with message in envd's error shape.
func writeHTTPStatus(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(envdError{Code: status, Message: message})
}
