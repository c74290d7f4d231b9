package backendtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
)

// memSandboxes is the part of a Memory that keeps its sandboxes: their
// records, creates, stops and removals, and answers Info, Console, Audit
// and Events.
type memSandboxes struct{ *memState }

// Creates returns the create requests seen, in order (also refused ones).
func (m *memSandboxes) Creates() []api.CreateSandboxRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.creates)
}

// Deletes returns the delete requests seen, "REF force=BOOL" each.
func (m *memSandboxes) Deletes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.deletes)
}

// SetState puts sandbox ref (ID or name) in state, as the daemon's own
// transitions would (a pause, a guest's death). Errors: 404 not_found.
func (m *memSandboxes) SetState(ref, state string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.lookup(ref)
	if err != nil {
		return err
	}
	sb.State = state
	return nil
}

// SetInfoError makes Info fail with err (nil: answer again).
func (m *memSandboxes) SetInfoError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.infoErr = err
}

func (m *memSandboxes) info(context.Context) (api.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.infoErr != nil {
		return api.Info{}, m.infoErr
	}
	return api.Info{Version: "test", API: "v1"}, nil
}

func (m *memSandboxes) createSandbox(ctx context.Context, req api.CreateSandboxRequest, templates func(context.Context) ([]api.Template, error)) (api.Sandbox, error) {
	m.mu.Lock()
	m.creates = append(m.creates, req)
	var taken error
	if req.Name != "" {
		if _, err := m.lookup(req.Name); err == nil {
			taken = api.Errorf(http.StatusConflict, api.CodeNameTaken, "the name %q is taken: choose another", req.Name)
		}
	}
	m.mu.Unlock()
	if taken != nil {
		return api.Sandbox{}, taken
	}
	if req.Template != "" {
		if err := templateImage(ctx, &req, templates); err != nil {
			return api.Sandbox{}, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	now := time.Now()
	sb := &api.Sandbox{
		Template: req.Template,
		ID:       fmt.Sprintf("%012x", 0xabc000+m.next), Name: req.Name, State: api.StateRunning,
		Image: api.ImageRef{Name: "test-image", Dir: req.Image}, Accel: "tcg",
		VCPUs: max(req.VCPUs, 1), MemoryMiB: max(req.MemoryMiB, 256), Labels: req.Labels,
		CreatedAt: now.Add(-90 * time.Second), StartedAt: &now, BootMs: 1234, Limits: req.Limits,
	}
	m.sandboxes[sb.ID] = sb
	m.files[sb.ID] = map[string]*memFile{"/": {dir: true, mode: 0o755}, "/work": {dir: true, mode: 0o755}}
	return *sb, nil
}

// templateImage resolves req.Template as the daemon does: the image is
// the template's, an unknown one is 404 template_not_found naming those
// there are.
func templateImage(ctx context.Context, req *api.CreateSandboxRequest, templates func(context.Context) ([]api.Template, error)) error {
	list, err := templates(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, t := range list {
		if t.Name == req.Template {
			req.Image = t.Image.Dir
			return nil
		}
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return api.Errorf(http.StatusNotFound, api.CodeTemplateNotFound, "template %q not found: this daemon serves %s (`agentbox templates` lists them)", req.Template, strings.Join(names, ", "))
}

func (m *memSandboxes) listSandboxes(labels map[string]string, state string) ([]api.Sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []api.Sandbox
	for i := 1; i <= m.next; i++ {
		sb, ok := m.sandboxes[fmt.Sprintf("%012x", 0xabc000+i)]
		if !ok || (state != "" && sb.State != state) {
			continue
		}
		match := true
		for k, v := range labels {
			if sb.Labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, *sb)
		}
	}
	return out, nil
}

func (m *memSandboxes) getSandbox(ref string) (api.Sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.lookup(ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	return *sb, nil
}

func (m *memSandboxes) stopSandbox(ref string) (api.Sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.lookup(ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb.State = api.StateStopped
	return *sb, nil
}

func (m *memSandboxes) deleteSandbox(ref string, force bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deletes = append(m.deletes, fmt.Sprintf("%s force=%t", ref, force))
	sb, err := m.lookup(ref)
	if err != nil {
		return err
	}
	if sb.State == api.StateRunning && !force {
		return api.Errorf(http.StatusConflict, api.CodeSandboxRunning, "sandbox %s is running: stop it first or remove it with force (agentbox rm -f)", sb.ID)
	}
	delete(m.sandboxes, sb.ID)
	return nil
}

func (m *memSandboxes) console(ref string, tail int64, w io.Writer) error {
	m.mu.Lock()
	_, err := m.lookup(ref)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	log := "[    0.000000] Linux version 6.1\nagentbox-init: agent up\n"
	if tail > 0 && tail < int64(len(log)) {
		log = log[int64(len(log))-tail:]
	}
	_, err = io.WriteString(w, log)
	return err
}

// MemoryAudit returns what Memory's Audit sends: a create and an exec of
// sandbox 000000abc001.
func MemoryAudit() []audit.Entry {
	return []audit.Entry{
		{Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Sandbox: "000000abc001", Caller: "uid:0", Action: audit.ActionCreate, Args: map[string]any{"image": "/img"}, DurationMs: 1500},
		{Time: time.Date(2025, 1, 2, 3, 4, 7, 0, time.UTC), Sandbox: "000000abc001", Caller: "uid:0", Action: audit.ActionExec, Args: map[string]any{"cmd": []any{"sh", "-c", "echo hi"}}, ExecID: "e1", ExitCode: intPtr(3), DurationMs: 20, BytesOut: 3, Stdout: &audit.OutputDigest{Bytes: 3, SHA256: strings.Repeat("0", 64), Head: "hi\n"}},
	}
}

func (m *memSandboxes) audit(ref string, emit func(audit.Entry) error) error {
	for _, e := range MemoryAudit() {
		if ref == "" || e.Sandbox == ref {
			if err := emit(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func intPtr(i int) *int { return &i }

func (m *memSandboxes) events(emit func(api.Event) error) error {
	return emit(api.Event{Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Type: api.EventSandboxState, Sandbox: "000000abc001", Name: "w1", State: api.StateFailed, Reason: "guest died"})
}
