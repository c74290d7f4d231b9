package envd

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process/processconnect"
)

// TestStartedForgotten: what Start keeps of a process (its config and
// tag) is dropped when the stream fails for another reason than the
// client (nobody can ask for it), and, once the process ended, at the
// next request that lists the sandbox's processes; a process whose client
// went away keeps it while it runs (Connect by tag finds it).
func TestStartedForgotten(t *testing.T) {
	var mu sync.Mutex
	state := api.ProcessRunning
	outputErr := error(nil)
	b := &backendtest.Fake{
		StartProcessFn: func(ctx context.Context, ref string, req api.ExecRequest) (api.Process, error) {
			return backendtest.Process("p1"), nil
		},
		ListProcessesFn: func(ctx context.Context, ref string) ([]api.Process, error) {
			mu.Lock()
			defer mu.Unlock()
			p := backendtest.Process("p1")
			p.State = state
			return []api.Process{p}, nil
		},
		ProcessOutputFn: func(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
			mu.Lock()
			err := outputErr
			mu.Unlock()
			if err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		},
	}
	as, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	svc := newProcessService(client.NewHandler(as.Handler()), Options{DefaultUser: "user"})
	_, h := processconnect.NewProcessHandler(svc)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(WithSandbox(r.Context(), backendtest.SandboxID)))
	}))
	t.Cleanup(srv.Close)
	pc := processconnect.NewProcessClient(http.DefaultClient, srv.URL)
	kept := func() int {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return len(svc.started)
	}
	tag := "srv"
	startReq := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "sleep"}, Tag: &tag})

	// The service fails the stream (the sandbox stopped).
	mu.Lock()
	outputErr = api.Errorf(http.StatusConflict, api.CodeNotRunning, "sandbox stopped")
	mu.Unlock()
	s, err := pc.Start(t.Context(), startReq)
	if err != nil {
		t.Fatal(err)
	}
	for s.Receive() {
	}
	s.Close()
	if connect.CodeOf(s.Err()) != connect.CodeUnavailable {
		t.Errorf("stream: %v", s.Err())
	}
	if n := kept(); n != 0 {
		t.Errorf("%d processes kept after the service failed the stream", n)
	}

	// The client goes away: kept while the process runs.
	mu.Lock()
	outputErr = nil
	mu.Unlock()
	ctx, cancel := context.WithCancel(t.Context())
	s, err = pc.Start(ctx, startReq)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() || s.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", s.Err())
	}
	cancel()
	s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for kept() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}}
	if _, err := pc.SendSignal(t.Context(), connect.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal_SIGNAL_SIGTERM})); err != nil {
		t.Errorf("signal by tag while it runs: %v", err)
	}
	if n := kept(); n != 1 {
		t.Errorf("%d processes kept while it runs, want 1", n)
	}

	// It ended: the next lookup forgets it.
	mu.Lock()
	state = api.ProcessExited
	mu.Unlock()
	_, err = pc.SendSignal(t.Context(), connect.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal_SIGNAL_SIGTERM}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("signal by tag after its end: %v", err)
	}
	if n := kept(); n != 0 {
		t.Errorf("%d processes kept after the end was seen, want 0", n)
	}
}
