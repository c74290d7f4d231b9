package e2b

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// E2B's sandbox states (schema SandboxState).
const (
	stateRunning = "running"
	statePaused  = "paused"
)

// noEnd is the endAt of a sandbox without a TTL (E2B's schema requires
// one): the end of year 9999.
const noEnd = "9999-12-31T23:59:59Z"

// e2bState is the E2B state of an agentbox sandbox: running (creating,
// running, stopping), paused (paused, and stopped: its disk is kept and
// connect boots it again, as E2B's filesystem-only pause), or "" for a
// failed one, which E2B has no word for: it is not listed, and get,
// connect and the data plane answer it as not found.
func e2bState(state string) string {
	switch state {
	case api.StateCreating, api.StateRunning, api.StateStopping:
		return stateRunning
	case api.StatePaused, api.StateStopped:
		return statePaused
	}
	return ""
}

// sandbox returns the sandbox of the request's {id} (an ID or a name),
// or the error to answer: 404 for an unknown or failed one.
func (s *Server) sandbox(ctx context.Context, r *http.Request) (api.Sandbox, error) {
	ref := r.PathValue("id")
	if err := api.CheckRef(ref); err != nil {
		return api.Sandbox{}, api.Errorf(http.StatusNotFound, api.CodeNotFound, "sandbox %s not found: %s", api.QuoteShort(ref), err.Error())
	}
	sb, err := s.cfg.Client.GetSandbox(ctx, ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	if e2bState(sb.State) == "" {
		return api.Sandbox{}, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("sandbox %s failed (%s): it cannot run again; kill it (agentbox rm %s)", sb.ID, sb.Reason, sb.ID))
	}
	return sb, nil
}

// answer is the Sandbox body of create and connect.
func (s *Server) answer(sb api.Sandbox) sandboxAnswer {
	return sandboxAnswer{SandboxID: sb.ID, TemplateID: templateOf(sb), ClientID: ClientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: accessToken(s.cfg.AccessKey, sb.ID)}
}

// create implements POST /v2/sandboxes: the sandbox is answered 201 once
// its guest agent answers (the service's create returns then), with the
// timeout counted from there.
func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var in newSandbox
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	req, timeout, err := createRequest(in)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.applyTemplate(r.Context(), in.TemplateID, &req); err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	sb, err := s.cfg.Client.CreateSandbox(ctx, req)
	if err != nil {
		writeError(w, s.templateError(ctx, req.Template, err))
		return
	}
	// The TTL ran from the create's start; E2B's timeout runs from the
	// answer. A failure here leaves the TTL of the request: still bounded.
	if upd, err := s.cfg.Client.SetTimeout(ctx, sb.ID, timeout); err == nil {
		sb = upd
	}
	writeJSON(w, http.StatusCreated, s.answer(sb))
}

// connect implements POST /v2/sandboxes/{id}/connect: 200 for a running
// sandbox (its timeout is extended to the request's, never shortened),
// 201 for a paused one resumed (or a stopped one booted again on its
// disk; with memory false a paused one is stopped and booted, the SDK's
// onResume: 'reboot'), whose timeout becomes the request's (default 300 s) always,
// as E2B gives every resumed sandbox one (pause ends the TTL, so nothing
// else would bound it). A running sandbox without a TTL (one made by
// `agentbox create` without --ttl) keeps none: it has no end to extend.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	var in connectRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	timeout := DefaultTimeout
	if in.Timeout != nil {
		if *in.Timeout < 1 || *in.Timeout > api.MaxTimeoutSeconds {
			writeError(w, api.Invalidf("timeout %d: want 1 to %d seconds", *in.Timeout, api.MaxTimeoutSeconds))
			return
		}
		timeout = time.Duration(*in.Timeout) * time.Second
	}
	ctx := r.Context()
	sb, err := s.sandbox(ctx, r)
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusOK
	switch sb.State {
	case api.StatePaused:
		if in.Memory != nil && !*in.Memory {
			if _, err = s.cfg.Client.StopSandbox(ctx, sb.ID); err == nil {
				sb, err = s.cfg.Client.StartSandbox(ctx, sb.ID)
			}
		} else {
			sb, err = s.cfg.Client.ResumeSandbox(ctx, sb.ID)
		}
		status = http.StatusCreated
	case api.StateStopped:
		sb, err = s.cfg.Client.StartSandbox(ctx, sb.ID)
		status = http.StatusCreated
	}
	if err != nil {
		writeError(w, err)
		return
	}
	end := s.cfg.Now().Add(timeout)
	resumed := status == http.StatusCreated
	extend := sb.ExpiresAt != nil && sb.ExpiresAt.Before(end)
	if resumed || extend {
		if sb, err = s.cfg.Client.SetTimeout(ctx, sb.ID, timeout); err != nil {
			writeError(w, err)
			return
		}
	}
	writeJSON(w, status, s.answer(sb))
}

// listed is the E2B view of sb in a list.
func (s *Server) listed(sb api.Sandbox) listedSandbox {
	started := sb.CreatedAt
	if sb.StartedAt != nil {
		started = *sb.StartedAt
	}
	end := noEnd
	if sb.ExpiresAt != nil {
		end = sb.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	var disk int64
	if sb.Resources != nil {
		disk = sb.Resources.DiskMiB
	}
	md := sb.Labels
	if md == nil {
		md = map[string]string{}
	}
	return listedSandbox{SandboxID: sb.ID, TemplateID: templateOf(sb), ClientID: ClientID,
		StartedAt: started.UTC().Format(time.RFC3339Nano), EndAt: end, CPUCount: sb.VCPUs, MemoryMB: sb.MemoryMiB,
		DiskSizeMB: disk, State: e2bState(sb.State), EnvdVersion: EnvdVersion, Metadata: md}
}

// get implements GET /sandboxes/{id}.
func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandbox(r.Context(), r)
	if err != nil {
		writeError(w, err)
		return
	}
	d := sandboxDetail{listedSandbox: s.listed(sb), EnvdAccessToken: accessToken(s.cfg.AccessKey, sb.ID),
		Lifecycle: lifecycle{OnTimeout: "kill"}}
	if a := sb.Limits.TTLAction; a != "" && a != api.IdleActionRemove {
		d.Lifecycle.OnTimeout = "pause"
	}
	if n := sb.Network; n != nil {
		open := n.Mode == "open"
		d.AllowInternetAccess = &open
		d.Network = &networkInfo{}
		switch n.Mode {
		case "allowlist":
			d.Network.AllowOut, d.Network.DenyOut = n.Allow, []string{allTraffic}
		case "none":
			d.Network.DenyOut = []string{allTraffic}
		}
	}
	writeJSON(w, http.StatusOK, d)
}

// maxListLimit is the largest page of GET /v2/sandboxes (E2B's too), and
// its default.
const maxListLimit = 100

// list implements GET /v2/sandboxes: metadata (k=v pairs, URL-encoded
// as the SDK does), state (running, paused; both by default),
// startedAfter, template, order (asc or desc by start, desc by default),
// limit (1..100, 100) and nextToken (opaque: the position after the last
// sandbox of the previous page), with the next page's token in
// X-Next-Token.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	labels, err := metadataFilter(q.Get("metadata"))
	if err != nil {
		writeError(w, err)
		return
	}
	states := []string{stateRunning, statePaused}
	if v := q.Get("state"); v != "" {
		states = strings.Split(v, ",")
		for _, st := range states {
			if st != stateRunning && st != statePaused {
				writeError(w, api.Invalidf("state %s: want running, paused or both (state=running,paused)", api.QuoteShort(st)))
				return
			}
		}
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		if after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			writeError(w, api.Invalidf("startedAfter %s: want an RFC 3339 time", api.QuoteShort(v)))
			return
		}
	}
	desc := true
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		desc = false
	default:
		writeError(w, api.Invalidf("order %s: want asc or desc", api.QuoteShort(q.Get("order"))))
		return
	}
	limit := maxListLimit
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > maxListLimit {
			writeError(w, api.Invalidf("limit %s: want 1 to %d", api.QuoteShort(v), maxListLimit))
			return
		}
	}
	var from *pagePos
	if v := q.Get("nextToken"); v != "" {
		p, err := parsePagePos(v)
		if err != nil {
			writeError(w, err)
			return
		}
		from = &p
	}
	all, err := s.cfg.Client.ListSandboxes(r.Context(), labels, "")
	if err != nil {
		writeError(w, err)
		return
	}
	var items []listedSandbox
	for _, sb := range all {
		l := s.listed(sb)
		if !slices.Contains(states, l.State) || (!after.IsZero() && !sb.CreatedAt.After(after)) ||
			(q.Get("template") != "" && l.TemplateID != q.Get("template")) {
			continue
		}
		items = append(items, l)
	}
	pos := func(l listedSandbox) pagePos { return pagePos{Started: l.StartedAt, ID: l.SandboxID} }
	slices.SortFunc(items, func(a, b listedSandbox) int {
		c := pos(a).compare(pos(b))
		if desc {
			c = -c
		}
		return c
	})
	if from != nil {
		i := 0
		for i < len(items) {
			c := pos(items[i]).compare(*from)
			if (desc && c < 0) || (!desc && c > 0) {
				break
			}
			i++
		}
		items = items[i:]
	}
	if len(items) > limit {
		items = items[:limit]
		w.Header().Set("X-Next-Token", pos(items[limit-1]).token())
	}
	if items == nil {
		items = []listedSandbox{}
	}
	writeJSON(w, http.StatusOK, items)
}

// metadataFilter parses the metadata query of a list: "k=v&k2=v2" as
// URLSearchParams writes it, each key and value URL-encoded once more by
// the SDK.
func metadataFilter(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	pairs, err := url.ParseQuery(raw)
	if err != nil {
		return nil, api.Invalidf("metadata %s: want key=value pairs joined by &", api.QuoteShort(raw))
	}
	out := make(map[string]string, len(pairs))
	for _, k := range slices.Sorted(maps.Keys(pairs)) {
		key, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(pairs[k][0])
		if err1 != nil || err2 != nil {
			return nil, api.Invalidf("metadata %s: a key or value is not URL-encoded", api.QuoteShort(raw))
		}
		if !api.ValidLabelKey(key) {
			return nil, api.Invalidf("metadata key %s: agentbox keeps metadata as labels, whose keys are 1 to 63 letters, digits, '_', '.', '/', '-', starting with a letter or digit", api.QuoteShort(key))
		}
		out[key] = val
	}
	return out, nil
}

// pagePos is a position in the list's order: a sandbox's start time
// (RFC 3339, UTC, so it sorts as text only when lengths agree: compared
// as times) and ID.
type pagePos struct {
	Started string
	ID      string
}

// compare orders positions by start time, then ID.
func (p pagePos) compare(o pagePos) int {
	a, _ := time.Parse(time.RFC3339Nano, p.Started)
	b, _ := time.Parse(time.RFC3339Nano, o.Started)
	if c := a.Compare(b); c != 0 {
		return c
	}
	return strings.Compare(p.ID, o.ID)
}

// token encodes p as a nextToken.
func (p pagePos) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte(p.Started + "|" + p.ID))
}

// parsePagePos decodes a nextToken. Errors are 400.
func parsePagePos(tok string) (pagePos, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	started, id, ok := strings.Cut(string(b), "|")
	if _, terr := time.Parse(time.RFC3339Nano, started); err != nil || !ok || terr != nil || !api.ValidID(id) {
		return pagePos{}, api.Invalidf("nextToken %s is not one this server gave: pass the X-Next-Token of the previous page", api.QuoteShort(tok))
	}
	return pagePos{Started: started, ID: id}, nil
}

// kill implements DELETE /sandboxes/{id}: the sandbox is removed, in
// whatever state (failed ones too), 204; 404 when there is none.
func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("id")
	if err := api.CheckRef(ref); err != nil {
		writeError(w, api.Errorf(http.StatusNotFound, api.CodeNotFound, "sandbox %s not found", api.QuoteShort(ref)))
		return
	}
	if err := s.cfg.Client.DeleteSandbox(r.Context(), ref, true); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// setTimeout implements POST /sandboxes/{id}/timeout: the sandbox
// expires timeout seconds from now (its TTL; longer or shorter), 204.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var in timeoutRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	if in.Timeout == nil || *in.Timeout < 1 || *in.Timeout > api.MaxTimeoutSeconds {
		writeError(w, api.Invalidf("timeout: want 1 to %d seconds from now", api.MaxTimeoutSeconds))
		return
	}
	sb, err := s.sandbox(r.Context(), r)
	if err != nil {
		writeError(w, err)
		return
	}
	if _, err := s.cfg.Client.SetTimeout(r.Context(), sb.ID, time.Duration(*in.Timeout)*time.Second); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pause implements POST /sandboxes/{id}/pause: a running sandbox is
// paused to disk (QEMU ends, memory and processes saved; connect resumes
// it in place) and its TTL ended, as E2B's timeout runs only while a
// sandbox runs, 204; 409 when it is paused (or stopped) already. memory
// false (E2B's filesystem-only pause) is answered the same: agentbox
// keeps the memory either way.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	var in pauseRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	sb, err := s.sandbox(r.Context(), r)
	if err != nil {
		writeError(w, err)
		return
	}
	if e2bState(sb.State) == statePaused {
		writeError(w, api.Errorf(http.StatusConflict, api.CodeConflict, "sandbox %s is already paused", sb.ID))
		return
	}
	if _, err := s.cfg.Client.Pause(r.Context(), sb.ID, api.PauseRequest{ToDisk: true, EndTTL: true}); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
