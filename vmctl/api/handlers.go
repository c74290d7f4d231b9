package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/audit"
)

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding the answer: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", ContentTypeJSON)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, err = w.Write(append(body, '\n'))
	return err
}

// ref returns the checked {id} of r.
func ref(r *http.Request) (string, error) {
	id := r.PathValue("id")
	return id, checkRef(id)
}

// refPid returns the checked {id} and {pid} of r.
func refPid(r *http.Request) (string, string, error) {
	id, err := ref(r)
	if err != nil {
		return "", "", err
	}
	pid := r.PathValue("pid")
	return id, pid, checkPid(pid)
}

// guestPath returns the checked, cleaned "path" query parameter.
func guestPath(q url.Values) (string, error) {
	return CleanGuestPath("query parameter path", q.Get("path"))
}

// untilDrain returns ctx, also cancelled when Shutdown starts.
func (s *Server) untilDrain(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.drain, cancel)
	return ctx, func() { stop(); cancel() }
}

func (s *Server) info(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	info, err := s.backend.Info(r.Context())
	if err != nil {
		return err
	}
	if info.Sandboxes == nil {
		info.Sandboxes = map[string]int{}
	}
	return writeJSON(w, http.StatusOK, info)
}

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request, _ url.Values) error {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Length", strconv.Itoa(len(openAPIDocument)))
	_, err := w.Write(openAPIDocument)
	return err
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	if s.metrics == nil {
		return Errorf(http.StatusNotFound, CodeNotFound, "this daemon serves no metrics")
	}
	s.metrics.ServeHTTP(w, r)
	return nil
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	var req CreateSandboxRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := validateCreate(&req); err != nil {
		return err
	}
	sb, err := s.backend.CreateSandbox(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sandboxes/"+sb.ID)
	return writeJSON(w, http.StatusCreated, sb)
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, q url.Values) error {
	var labels map[string]string
	for _, kv := range q["label"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return invalid("label filter %s is not KEY=VALUE", quoteShort(kv))
		}
		if labels == nil {
			labels = make(map[string]string)
		}
		if _, dup := labels[k]; dup {
			return invalid("label filter key %q is given twice", k)
		}
		labels[k] = v
	}
	if err := checkLabels(labels); err != nil {
		return err
	}
	state := q.Get("state")
	if state != "" && !validState(state) {
		return invalid("state %s is not one of creating, running, stopping, stopped, failed", quoteShort(state))
	}
	list, err := s.backend.ListSandboxes(r.Context(), labels, state)
	if err != nil {
		return err
	}
	if list == nil {
		list = []Sandbox{}
	}
	return writeJSON(w, http.StatusOK, SandboxList{Sandboxes: list})
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	sb, err := s.backend.GetSandbox(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	sb, err := s.backend.StopSandbox(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, q url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	force, err := queryBool(q, "force")
	if err != nil {
		return err
	}
	if err := s.backend.DeleteSandbox(r.Context(), id, force); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) console(w http.ResponseWriter, r *http.Request, q url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	tail, err := queryInt(q, "tail")
	if err != nil {
		return err
	}
	body := &lazyBody{w: w, header: func(h http.Header) {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Content-Type-Options", "nosniff")
	}}
	if err := s.backend.Console(r.Context(), id, tail, body); err != nil {
		return err
	}
	body.begin() // an empty log is an empty 200
	return nil
}

func (s *Server) auditSandbox(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	return s.audit(w, r, id)
}

func (s *Server) auditAll(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	return s.audit(w, r, "")
}

// audit streams audit entries; an error after the first one cuts the
// stream (routeHandler aborts the connection).
func (s *Server) audit(w http.ResponseWriter, r *http.Request, id string) error {
	st := newNDJSONStream(w)
	if err := s.backend.Audit(r.Context(), id, func(e audit.Entry) error { return st.send(e) }); err != nil {
		return err
	}
	if !st.started() {
		return st.start()
	}
	return nil
}

// events streams sandbox events until the client goes or Shutdown starts.
func (s *Server) events(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	ctx, cancel := s.untilDrain(r.Context())
	defer cancel()
	st := newNDJSONStream(w)
	if err := st.start(); err != nil {
		return err
	}
	err := s.backend.Events(ctx, func(e Event) error { return st.send(e) })
	if err != nil && ctx.Err() != nil {
		return nil // the client went or the server is shutting down
	}
	return err
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	var req ExecRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := validateExec(&req, true); err != nil {
		return err
	}
	st := newNDJSONStream(w)
	started := func(execID string, pid int) {
		st.send(ExecEvent{Type: EventStarted, ExecID: execID, Pid: pid})
	}
	status, err := s.backend.Exec(r.Context(), id, req, started, output{st, EventStdout}, output{st, EventStderr})
	if err != nil {
		if !st.started() || clientGone(r, err) {
			return err // an ordinary error answer with its status, or nobody to answer
		}
		e := s.apiError(r, "/v1/sandboxes/{id}/exec", err)
		st.send(ExecEvent{Type: EventError, Error: e})
		return nil
	}
	st.send(ExecEvent{Type: EventExit, Exit: &status})
	return nil
}

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	var req ExecRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := validateExec(&req, false); err != nil {
		return err
	}
	p, err := s.backend.StartProcess(r.Context(), id, req)
	if err != nil {
		return err
	}
	normaliseProcess(&p)
	w.Header().Set("Location", "/v1/sandboxes/"+id+"/processes/"+p.ID)
	return writeJSON(w, http.StatusCreated, p)
}

// normaliseProcess makes a nil Cmd an empty list (the schema's array).
func normaliseProcess(p *Process) {
	if p.Cmd == nil {
		p.Cmd = []string{}
	}
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	list, err := s.backend.ListProcesses(r.Context(), id)
	if err != nil {
		return err
	}
	if list == nil {
		list = []Process{}
	}
	for i := range list {
		normaliseProcess(&list[i])
	}
	return writeJSON(w, http.StatusOK, ProcessList{Processes: list})
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	id, pid, err := refPid(r)
	if err != nil {
		return err
	}
	p, err := s.backend.GetProcess(r.Context(), id, pid)
	if err != nil {
		return err
	}
	normaliseProcess(&p)
	return writeJSON(w, http.StatusOK, p)
}

// processOutput streams a detached process's output; with follow it lasts
// until the process ends, the client goes or Shutdown starts (then the
// stream ends without an exit event: resume with ?offset=).
func (s *Server) processOutput(w http.ResponseWriter, r *http.Request, q url.Values) error {
	id, pid, err := refPid(r)
	if err != nil {
		return err
	}
	offset, err := queryInt(q, "offset")
	if err != nil {
		return err
	}
	follow, err := queryBool(q, "follow")
	if err != nil {
		return err
	}
	ctx, cancel := s.untilDrain(r.Context())
	defer cancel()
	st := newNDJSONStream(w)
	err = s.backend.ProcessOutput(ctx, id, pid, offset, follow, func(ev ExecEvent) error { return st.send(ev) })
	switch {
	case err == nil:
	case s.drain.Err() != nil && r.Context().Err() == nil && errors.Is(err, context.Canceled):
		// Shutting down: end the stream cleanly below.
	case !st.started(), clientGone(r, err):
		return err
	default:
		e := s.apiError(r, "/v1/sandboxes/{id}/processes/{pid}/output", err)
		st.send(ExecEvent{Type: EventError, Error: e})
		return nil
	}
	if !st.started() {
		return st.start()
	}
	return nil
}

func (s *Server) writeStdin(w http.ResponseWriter, r *http.Request, q url.Values) error {
	id, pid, err := refPid(r)
	if err != nil {
		return err
	}
	closeAfter, err := queryBool(q, "close")
	if err != nil {
		return err
	}
	n, err := s.backend.WriteStdin(r.Context(), id, pid, &rawBody{r: r.Body, want: r.ContentLength, what: "stdin"}, closeAfter)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, StdinResult{Bytes: n})
}

func (s *Server) killProcess(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	id, pid, err := refPid(r)
	if err != nil {
		return err
	}
	var req KillRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := validateKill(&req); err != nil {
		return err
	}
	if err := s.backend.KillProcess(r.Context(), id, pid, req.Signal); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request, q url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	p, err := guestPath(q)
	if err != nil {
		return err
	}
	mode := q.Get("mode")
	if mode == "" {
		mode = "0644"
	}
	perm, err := ParseMode(mode)
	if err != nil {
		return err
	}
	parents, err := queryBool(q, "parents")
	if err != nil {
		return err
	}
	fi, err := s.backend.Upload(r.Context(), id, p, perm, parents, &rawBody{r: r.Body, want: r.ContentLength, what: "upload"})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, fi)
}

// download streams a file: Content-Length, HeaderMode and HeaderModTime
// from its FileInfo, sent with the first byte (an error before it is an
// ordinary error answer; after it, routeHandler cuts the connection).
func (s *Server) download(w http.ResponseWriter, r *http.Request, q url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	p, err := guestPath(q)
	if err != nil {
		return err
	}
	var body *lazyBody
	err = s.backend.Download(r.Context(), id, p, func(fi FileInfo) io.Writer {
		body = &lazyBody{w: w, header: func(h http.Header) {
			h.Set("Content-Type", ContentTypeOctetStream)
			h.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
			h.Set(HeaderMode, fi.Mode)
			h.Set(HeaderModTime, fi.ModTime.UTC().Format(time.RFC3339Nano))
		}}
		return body
	})
	if err != nil {
		return err
	}
	if body == nil {
		return fmt.Errorf("the backend's Download of %s returned without opening the file", p)
	}
	body.begin() // an empty file
	return nil
}

func (s *Server) stat(w http.ResponseWriter, r *http.Request, q url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	p, err := guestPath(q)
	if err != nil {
		return err
	}
	fi, err := s.backend.Stat(r.Context(), id, p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, fi)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, q url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	p, err := guestPath(q)
	if err != nil {
		return err
	}
	files, err := s.backend.List(r.Context(), id, p)
	if err != nil {
		return err
	}
	if files == nil {
		files = []FileInfo{}
	}
	return writeJSON(w, http.StatusOK, FileList{Files: files})
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	var req MkdirRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := validateMkdir(&req); err != nil {
		return err
	}
	if err := s.backend.Mkdir(r.Context(), id, req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request, q url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	p, err := guestPath(q)
	if err != nil {
		return err
	}
	if p == "/" {
		return invalid("refusing to remove / of the sandbox: delete the sandbox instead")
	}
	recursive, err := queryBool(q, "recursive")
	if err != nil {
		return err
	}
	if err := s.backend.RemoveFile(r.Context(), id, p, recursive); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// rawBody is a streamed request body (upload, stdin) handed to the
// Backend: a read error, or an end before the announced Content-Length,
// becomes a 400 the Backend returns (it must not commit a cut upload).
type rawBody struct {
	r    io.Reader
	want int64 // Content-Length, -1 when chunked
	n    int64
	what string
}

func (b *rawBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	switch {
	case err == io.EOF && b.want >= 0 && b.n != b.want:
		return n, badRequest("the %s body ended after %d of its %d bytes (Content-Length): send it again", b.what, b.n, b.want)
	case err != nil && err != io.EOF:
		return n, badRequest("reading the %s body failed after %d bytes: %v", b.what, b.n, err)
	}
	return n, err
}

func (s *Server) execHistory(w http.ResponseWriter, r *http.Request, q url.Values) error {
	id, err := ref(r)
	if err != nil {
		return err
	}
	limit, err := queryInt(q, "limit")
	if err != nil {
		return err
	}
	list, err := s.backend.ExecHistory(r.Context(), id, int(min(limit, 1<<30)))
	if err != nil {
		return err
	}
	if list == nil {
		list = []ExecRecord{}
	}
	for i := range list {
		if list[i].Cmd == nil {
			list[i].Cmd = []string{}
		}
	}
	return writeJSON(w, http.StatusOK, ExecList{Execs: list})
}
