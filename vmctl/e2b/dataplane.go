package e2b

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/envd"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// EnvdPort is the port E2B's envd listens on in the guest, which the SDK
// sends as E2b-Sandbox-Port with every data-plane request.
const EnvdPort = "49983"

// serveData serves a data-plane request for sandbox ref (its
// E2b-Sandbox-Id: the ID, or the name Sandbox.connect was given):
// 401 in envd's shape without the sandbox's access token
// (X-Access-Token), 502 for an unknown, failed, paused or stopped sandbox
// (what E2B's proxy answers; the SDK raises TimeoutError for it and its
// health probe reads "not running"), 404 for another port than envd's;
// else the envd handler with the sandbox's ID in the context.
func (s *Server) serveData(w http.ResponseWriter, r *http.Request, ref string) {
	if p := r.Header.Get("E2b-Sandbox-Port"); p != "" && p != EnvdPort {
		writeError(w, api.Errorf(http.StatusNotFound, api.CodeNotFound,
			"port %s of sandbox %s: agentbox's E2B front serves only envd (port %s); forward other ports with agentbox port", api.QuoteShort(p), api.QuoteShort(ref), EnvdPort))
		return
	}
	if err := api.CheckRef(ref); err != nil {
		writeError(w, api.Errorf(http.StatusBadGateway, api.CodeNotFound, "sandbox %s not found", api.QuoteShort(ref)))
		return
	}
	sb, err := s.cfg.Client.GetSandbox(r.Context(), ref)
	// The token is checked before anything about the sandbox is said, so
	// that without it every answer is the same 401. A reference that
	// finds no sandbox checks against itself (and fails). The lookup
	// comes first because the SDK sends the reference Sandbox.connect was
	// given, which may be a name; it is an in-memory lookup, so the time
	// of a refusal says little about whether the sandbox exists (not
	// nothing: see docs/e2b.md, Security).
	id := ref
	if err == nil {
		id = sb.ID
	}
	if !validAccessToken(s.cfg.AccessKey, id, r.Header.Get("X-Access-Token")) {
		msg := "missing X-Access-Token: send the envdAccessToken create or connect returned"
		if r.Header.Get("X-Access-Token") != "" {
			msg = "wrong X-Access-Token for sandbox " + ref + ": send the envdAccessToken create or connect returned for it"
		}
		s.refuse(w, r, http.StatusUnauthorized, api.CodeUnauthorized, msg)
		return
	}
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = api.Errorf(http.StatusBadGateway, api.CodeNotFound, "sandbox %s not found", ref)
		}
		writeError(w, err)
		return
	}
	if sb.State != api.StateRunning {
		hint := ""
		if e2bState(sb.State) == statePaused {
			hint = ": Sandbox.connect resumes it"
		}
		writeError(w, api.Errorf(http.StatusBadGateway, api.CodeNotRunning, "%s", fmt.Sprintf("sandbox %s is %s%s", sb.ID, sb.State, hint)))
		return
	}
	if s.cfg.Data == nil {
		writeError(w, api.Errorf(http.StatusNotImplemented, api.CodeNotImplemented, "this daemon serves no E2B data plane"))
		return
	}
	s.cfg.Data.ServeHTTP(w, r.WithContext(envd.WithSandbox(r.Context(), sb.ID)))
}
