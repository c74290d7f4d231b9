package apiserver

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

func info(s *Server, r *request) (api.Info, error) {
	info, err := s.backend.Info(r.Context())
	if info.Sandboxes == nil {
		info.Sandboxes = map[string]int{}
	}
	return info, err
}

func openAPI(_ *Server, w http.ResponseWriter, _ *request) error {
	doc := api.OpenAPI()
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Length", strconv.Itoa(len(doc)))
	_, err := w.Write(doc)
	return err
}

func serveMetrics(s *Server, w http.ResponseWriter, r *request) error {
	if s.metrics == nil {
		return api.Errorf(http.StatusNotFound, api.CodeNotFound, "this daemon serves no metrics")
	}
	if t, ok := tenant.From(r.Context()); ok {
		return api.Errorf(http.StatusForbidden, api.CodePermissionDenied, "the daemon's metrics cover every tenant: tenant %s may not read them (the admin may)", t.Name)
	}
	s.metrics.ServeHTTP(w, r.Request)
	return nil
}

func sandboxLocation(_ *request, sb api.Sandbox) string { return "/v1/sandboxes/" + sb.ID }

func createSandbox(s *Server, r *request, req api.CreateSandboxRequest) (api.Sandbox, error) {
	return s.backend.CreateSandbox(r.Context(), req)
}

func listSandboxes(s *Server, r *request) (api.SandboxList, error) {
	var labels map[string]string
	for _, kv := range r.q["label"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return api.SandboxList{}, api.Invalidf("label filter %s is not KEY=VALUE", api.QuoteShort(kv))
		}
		if labels == nil {
			labels = make(map[string]string)
		}
		if _, dup := labels[k]; dup {
			return api.SandboxList{}, api.Invalidf("label filter key %q is given twice", k)
		}
		labels[k] = v
	}
	if err := api.CheckLabels(labels); err != nil {
		return api.SandboxList{}, err
	}
	state := r.q.Get("state")
	if state != "" && !api.ValidState(state) {
		return api.SandboxList{}, api.Invalidf("state %s is not one of creating, running, stopping, stopped, failed", api.QuoteShort(state))
	}
	list, err := s.backend.ListSandboxes(r.Context(), labels, state)
	if err == nil && s.router != nil {
		list, err = s.router.List(r.Request, list) // the other cluster nodes' (cluster.go)
	}
	return api.SandboxList{Sandboxes: nonNil(list)}, err
}

func getSandbox(s *Server, r *request) (api.Sandbox, error) {
	return s.backend.GetSandbox(r.Context(), r.id)
}

func stopSandbox(s *Server, r *request) (api.Sandbox, error) {
	return s.backend.StopSandbox(r.Context(), r.id)
}

func deleteSandbox(s *Server, r *request) error {
	force, err := queryBool(r.q, "force")
	if err != nil {
		return err
	}
	return s.backend.DeleteSandbox(r.Context(), r.id, force)
}

func console(s *Server, w http.ResponseWriter, r *request) error {
	tail, err := queryInt(r.q, "tail")
	if err != nil {
		return err
	}
	body := &lazyBody{w: w, header: func(h http.Header) {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Content-Type-Options", "nosniff")
	}}
	if err := s.backend.Console(r.Context(), r.id, tail, body); err != nil {
		return err
	}
	body.begin() // an empty log is an empty 200
	return nil
}

// auditLog streams audit entries (of r.id, or of all sandboxes on
// /v1/audit); an error after the first one cuts the stream (routeHandler
// aborts the connection).
func auditLog(s *Server, w http.ResponseWriter, r *request) error {
	st := newNDJSONStream(w)
	if err := s.backend.Audit(r.Context(), r.id, func(e audit.Entry) error { return st.send(e) }); err != nil {
		return err
	}
	if !st.started() {
		return st.start()
	}
	return nil
}

// events streams sandbox events until the client goes or Shutdown starts.
func events(s *Server, w http.ResponseWriter, r *request) error {
	ctx, cancel := s.untilDrain(r.Context())
	defer cancel()
	st := newNDJSONStream(w)
	if err := st.start(); err != nil {
		return err
	}
	err := s.backend.Events(ctx, func(e api.Event) error { return st.send(e) })
	if err != nil && ctx.Err() != nil {
		return nil // the client went or the server is shutting down
	}
	return err
}

func validateAttached(req *api.ExecRequest) error { return req.Validate(true) }
func validateDetached(req *api.ExecRequest) error { return req.Validate(false) }

func exec(s *Server, w http.ResponseWriter, r *request) error {
	var req api.ExecRequest
	if err := decodeJSON(r.Request, &req); err != nil {
		return err
	}
	if err := validateAttached(&req); err != nil {
		return err
	}
	st := newNDJSONStream(w)
	started := func(execID string, pid int) {
		st.send(api.ExecEvent{Type: api.EventStarted, ExecID: execID, Pid: pid})
	}
	status, err := s.backend.Exec(r.Context(), r.id, req, started, output{st, api.EventStdout}, output{st, api.EventStderr})
	if err != nil {
		if !st.started() || clientGone(r.Request, err) {
			return err // an ordinary error answer with its status, or nobody to answer
		}
		e := s.apiError(r.Request, "/v1/sandboxes/{id}/exec", err)
		st.send(api.ExecEvent{Type: api.EventError, Error: e})
		return nil
	}
	st.send(api.ExecEvent{Type: api.EventExit, Exit: &status})
	return nil
}

func processLocation(r *request, p api.Process) string {
	return "/v1/sandboxes/" + r.id + "/processes/" + p.ID
}

func startProcess(s *Server, r *request, req api.ExecRequest) (api.Process, error) {
	p, err := s.backend.StartProcess(r.Context(), r.id, req)
	return normaliseProcess(p), err
}

// normaliseProcess makes a nil Cmd an empty list (the schema's array).
func normaliseProcess(p api.Process) api.Process {
	p.Cmd = nonNil(p.Cmd)
	return p
}

func listProcesses(s *Server, r *request) (api.ProcessList, error) {
	list, err := s.backend.ListProcesses(r.Context(), r.id)
	list = nonNil(list)
	for i := range list {
		list[i] = normaliseProcess(list[i])
	}
	return api.ProcessList{Processes: list}, err
}

func getProcess(s *Server, r *request) (api.Process, error) {
	p, err := s.backend.GetProcess(r.Context(), r.id, r.pid)
	return normaliseProcess(p), err
}

// processOutput streams a detached process's output; with follow it lasts
// until the process ends, the client goes or Shutdown starts (then the
// stream ends without an exit event: resume with ?offset=).
func processOutput(s *Server, w http.ResponseWriter, r *request) error {
	offset, err := queryInt(r.q, "offset")
	if err != nil {
		return err
	}
	follow, err := queryBool(r.q, "follow")
	if err != nil {
		return err
	}
	ctx, cancel := s.untilDrain(r.Context())
	defer cancel()
	st := newNDJSONStream(w)
	err = s.backend.ProcessOutput(ctx, r.id, r.pid, offset, follow, func(ev api.ExecEvent) error { return st.send(ev) })
	return s.endFollow(r, st, "/v1/sandboxes/{id}/processes/{pid}/output", err, func(e *api.Error) any {
		return api.ExecEvent{Type: api.EventError, Error: e}
	})
}

func writeStdin(s *Server, r *request) (api.StdinResult, error) {
	closeAfter, err := queryBool(r.q, "close")
	if err != nil {
		return api.StdinResult{}, err
	}
	n, err := s.backend.WriteStdin(r.Context(), r.id, r.pid, &rawBody{r: r.Body, want: r.ContentLength, what: "stdin"}, closeAfter)
	return api.StdinResult{Bytes: n}, err
}

func killProcess(s *Server, r *request, req api.KillRequest) (struct{}, error) {
	return struct{}{}, s.backend.KillProcess(r.Context(), r.id, r.pid, req.Signal)
}

func upload(s *Server, r *request) (api.FileInfo, error) {
	p, err := r.path()
	if err != nil {
		return api.FileInfo{}, err
	}
	mode := r.q.Get("mode")
	if mode == "" {
		mode = "0644"
	}
	perm, err := api.ParseMode(mode)
	if err != nil {
		return api.FileInfo{}, err
	}
	parents, err := queryBool(r.q, "parents")
	if err != nil {
		return api.FileInfo{}, err
	}
	owner := r.q.Get("owner")
	if err := api.CheckOwner("query parameter owner", owner); err != nil {
		return api.FileInfo{}, err
	}
	req := api.UploadRequest{Path: p, Mode: perm, Parents: parents, Owner: owner}
	return s.backend.Upload(r.Context(), r.id, req, &rawBody{r: r.Body, want: r.ContentLength, what: "upload"})
}

// download streams a file: Content-Length, HeaderMode and HeaderModTime
// from its FileInfo, sent with the first byte (an error before it is an
// ordinary error answer; after it, routeHandler cuts the connection).
func download(s *Server, w http.ResponseWriter, r *request) error {
	p, err := r.path()
	if err != nil {
		return err
	}
	var body *lazyBody
	err = s.backend.Download(r.Context(), r.id, p, func(fi api.FileInfo) io.Writer {
		body = &lazyBody{w: w, header: func(h http.Header) {
			h.Set("Content-Type", api.ContentTypeOctetStream)
			h.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
			h.Set(api.HeaderMode, fi.Mode)
			h.Set(api.HeaderModTime, fi.ModTime.UTC().Format(time.RFC3339Nano))
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

func stat(s *Server, r *request) (api.FileInfo, error) {
	p, err := r.path()
	if err != nil {
		return api.FileInfo{}, err
	}
	return s.backend.Stat(r.Context(), r.id, p)
}

func list(s *Server, r *request) (api.FileList, error) {
	p, err := r.path()
	if err != nil {
		return api.FileList{}, err
	}
	depth, err := queryInt(r.q, "depth")
	if err != nil {
		return api.FileList{}, err
	}
	if depth > api.MaxListDepth {
		return api.FileList{}, api.Invalidf("query parameter depth=%d is above the limit of %d levels", depth, api.MaxListDepth)
	}
	files, err := s.backend.List(r.Context(), r.id, p, max(int(depth), 1))
	return api.FileList{Files: nonNil(files)}, err
}

func moveFile(s *Server, r *request, req api.MoveRequest) (api.FileInfo, error) {
	return s.backend.Move(r.Context(), r.id, req)
}

func mkdir(s *Server, r *request, req api.MkdirRequest) (struct{}, error) {
	return struct{}{}, s.backend.Mkdir(r.Context(), r.id, req)
}

func removeFile(s *Server, r *request) error {
	p, err := r.path()
	if err != nil {
		return err
	}
	if p == "/" {
		return api.Invalidf("refusing to remove / of the sandbox: delete the sandbox instead")
	}
	recursive, err := queryBool(r.q, "recursive")
	if err != nil {
		return err
	}
	return s.backend.RemoveFile(r.Context(), r.id, p, recursive)
}

func execHistory(s *Server, r *request) (api.ExecList, error) {
	limit, err := queryInt(r.q, "limit")
	if err != nil {
		return api.ExecList{}, err
	}
	list, err := s.backend.ExecHistory(r.Context(), r.id, int(min(limit, 1<<30)))
	list = nonNil(list)
	for i := range list {
		list[i].Cmd = nonNil(list[i].Cmd)
	}
	return api.ExecList{Execs: list}, err
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
