package e2b_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/e2b"
	"github.com/agentbox/agentbox/vmctl/envd"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// testKey is the API key of the tests' fronts.
const testKey = "e2b-test-key-0123456789abcdef0123"

// store is a fake sandbox service's sandboxes, in memory: creates are
// numbered 000000000001, ...; every call records its caller.
type store struct {
	mu      sync.Mutex
	boxes   map[string]api.Sandbox
	n       int
	created []api.CreateSandboxRequest
	callers []string
	pauses  []api.PauseRequest
	timeout map[string]int64
}

func (st *store) get(ref string) (api.Sandbox, error) {
	for _, sb := range st.boxes {
		if sb.ID == ref || sb.Name == ref {
			return sb, nil
		}
	}
	return api.Sandbox{}, errdefs.ErrNotFound.WithMessage("sandbox " + ref + " not found")
}

func (st *store) caller(ctx context.Context) {
	st.callers = append(st.callers, api.CallerFrom(ctx).ID)
}

// add puts a sandbox in state with labels into the store.
func (st *store) add(id, state string, labels map[string]string, created time.Time) api.Sandbox {
	st.mu.Lock()
	defer st.mu.Unlock()
	sb := backendtest.Sandbox(id)
	sb.Name, sb.State, sb.Labels, sb.CreatedAt, sb.StartedAt = "", state, labels, created, &created
	sb.Limits, sb.ExpiresAt = api.Limits{}, nil
	st.boxes[id] = sb
	return sb
}

func (st *store) backend() *backendtest.Fake {
	st.boxes, st.timeout = map[string]api.Sandbox{}, map[string]int64{}
	update := func(ctx context.Context, ref string, f func(*api.Sandbox) error) (api.Sandbox, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.caller(ctx)
		sb, err := st.get(ref)
		if err != nil {
			return sb, err
		}
		if err := f(&sb); err != nil {
			return api.Sandbox{}, err
		}
		st.boxes[sb.ID] = sb
		return sb, nil
	}
	return &backendtest.Fake{
		CreateSandboxFn: func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
			st.mu.Lock()
			defer st.mu.Unlock()
			st.caller(ctx)
			st.created = append(st.created, req)
			if req.Template != "base" && req.Template != "python" {
				// As the daemon answers it (daemon.ErrTemplateNotFound).
				return api.Sandbox{}, errdefs.New(errdefs.ErrNotFound, api.CodeTemplateNotFound,
					fmt.Sprintf("template %q not found: this daemon serves base, python (`agentbox templates` lists them)", req.Template))
			}
			st.n++
			sb := backendtest.Sandbox(fmt.Sprintf("%012d", st.n))
			sb.Name, sb.Labels, sb.Limits, sb.Template = "", req.Labels, req.Limits, req.Template
			st.boxes[sb.ID] = sb
			return sb, nil
		},
		ListSandboxesFn: func(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
			st.mu.Lock()
			defer st.mu.Unlock()
			st.caller(ctx)
			var out []api.Sandbox
			for _, id := range slices.Sorted(maps.Keys(st.boxes)) {
				sb := st.boxes[id]
				ok := true
				for k, v := range labels {
					ok = ok && sb.Labels[k] == v
				}
				if ok {
					out = append(out, sb)
				}
			}
			return out, nil
		},
		GetSandboxFn: func(ctx context.Context, ref string) (api.Sandbox, error) {
			return update(ctx, ref, func(*api.Sandbox) error { return nil })
		},
		DeleteSandboxFn: func(ctx context.Context, ref string, force bool) error {
			st.mu.Lock()
			defer st.mu.Unlock()
			st.caller(ctx)
			sb, err := st.get(ref)
			if err != nil {
				return err
			}
			if !force {
				return fmt.Errorf("delete without force")
			}
			delete(st.boxes, sb.ID)
			return nil
		},
		StopSandboxFn: func(ctx context.Context, ref string) (api.Sandbox, error) {
			return update(ctx, ref, func(sb *api.Sandbox) error { sb.State = api.StateStopped; return nil })
		},
		Lifecycle: backendtest.LifecycleFns{
			PauseFn: func(ctx context.Context, ref string, req api.PauseRequest) (api.Sandbox, error) {
				return update(ctx, ref, func(sb *api.Sandbox) error {
					st.pauses = append(st.pauses, req)
					sb.State = api.StatePaused
					if req.EndTTL {
						sb.ExpiresAt = nil
					}
					return nil
				})
			},
			ResumeFn: func(ctx context.Context, ref string, ifPaused bool) (api.Sandbox, error) {
				return update(ctx, ref, func(sb *api.Sandbox) error {
					if sb.State != api.StatePaused {
						return errdefs.ErrConflict.WithMessage("not paused")
					}
					sb.State = api.StateRunning
					return nil
				})
			},
			StartFn: func(ctx context.Context, ref string) (api.Sandbox, error) {
				return update(ctx, ref, func(sb *api.Sandbox) error { sb.State = api.StateRunning; return nil })
			},
		},
		Fork: backendtest.ForkFns{
			TimeoutFn: func(ctx context.Context, ref string, req api.TimeoutRequest) (api.Sandbox, error) {
				return update(ctx, ref, func(sb *api.Sandbox) error {
					st.timeout[sb.ID] = req.TimeoutSeconds
					exp := time.Now().Add(time.Duration(req.TimeoutSeconds) * time.Second)
					sb.ExpiresAt = &exp
					return nil
				})
			},
		},
	}
}

// front is an E2B front over a fake service, served over HTTP; data is
// its data plane (nil: a handler that answers the sandbox ID it got).
func front(t *testing.T, b *backendtest.Fake, data http.Handler) (*httptest.Server, []byte) {
	t.Helper()
	return frontWith(t, b, data, e2b.Config{})
}

// frontWith is front with the options of cfg (Warm); the client, data
// plane and keys are the tests'.
func frontWith(t *testing.T, b *backendtest.Fake, data http.Handler, cfg e2b.Config) (*httptest.Server, []byte) {
	t.Helper()
	as, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	if data == nil {
		data = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "envd for %s as %s", envd.SandboxFrom(r.Context()), api.CallerFrom(r.Context()).ID)
		})
	}
	key, err := e2b.LoadAccessKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client, cfg.Data, cfg.Keyring, cfg.AccessKey = client.NewHandler(as.Handler()), data, auth.New(auth.Config{Admin: testKey}), key
	f, err := e2b.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv, key
}
