package backendtest

import (
	"net/http"
	"sync"

	"github.com/agentbox/agentbox/vmctl/api"
)

// Memory is the in-memory service behind a Fake from NewMemory. Sandboxes
// are records (IDs 000000abc001, 000000abc002, … in create order, booted
// at once, running), each with an in-memory filesystem holding / and
// /work; commands are a few scripted programs:
//
//	out STDOUT STDERR CODE   writes STDOUT and STDERR, exits CODE
//	allbytes CODE            writes bytes 0..255 to stdout, 255..0 to stderr, exits CODE
//	cat                      copies stdin to stdout
//	sleep                    runs until killed or ctx ends (137, signal 9)
//	timeout                  times out (124)
//	anything else            fails to start: not found (127)
//
// The Backend methods answered from Memory: Info, the sandbox methods,
// Exec, ExecInteractive, the detached process methods, the file methods,
// ExecHistory (every exec request seen, exited 0), Console, Audit (two
// fixed entries), Events (one event, then the stream ends as a daemon
// shutting down ends it), ResizeProcess and AttachProcess. A create with
// a template resolves it against the Fake's ListTemplates (404
// template_not_found otherwise). The other capability methods answer
// fixtures. Its accessors return copies and may be called at any time.
//
// Memory is split by concern, the parts sharing one memState (and its
// one mutex) by pointer: memSandboxes (memory_sandboxes.go: sandboxes,
// console, audit, events), memExec (memory_exec.go: execs, detached
// processes, terminals, the exec history) and memFiles (memory_files.go).
type Memory struct {
	*memSandboxes
	*memExec
	*memFiles
}

// memState is the state of a Memory its parts share; mu guards all of it.
type memState struct {
	mu        sync.Mutex
	next      int
	sandboxes map[string]*api.Sandbox // by ID
	files     map[string]map[string]*memFile
	procs     map[string]*memProc // by sandbox ID + "/" + process ID
	nprocs    int
	creates   []api.CreateSandboxRequest
	deletes   []string // "ID force=BOOL"
	execs     []api.ExecRequest
	kills     []string // "PROCESS SIGNAL"
	infoErr   error
	outputErr *api.Error
	attached  chan struct{}
	sleeping  chan struct{}
	// interactive are the requests of interactive execs, also in execs.
	interactive []api.ExecRequest
}

// NewMemory returns a Fake answering from a fresh Memory (its Memory
// field); *Fn fields set on it still take precedence.
func NewMemory() *Fake {
	st := &memState{
		sandboxes: map[string]*api.Sandbox{}, files: map[string]map[string]*memFile{}, procs: map[string]*memProc{},
		sleeping: make(chan struct{}, 16),
	}
	return &Fake{Memory: &Memory{memSandboxes: &memSandboxes{st}, memExec: &memExec{st}, memFiles: &memFiles{st}}}
}

func notFound(format string, args ...any) error {
	return api.Errorf(http.StatusNotFound, api.CodeNotFound, format, args...)
}

// lookup finds a sandbox by ID or name; m.mu must be held.
func (m *memState) lookup(ref string) (*api.Sandbox, error) {
	if sb, ok := m.sandboxes[ref]; ok {
		return sb, nil
	}
	for _, sb := range m.sandboxes {
		if sb.Name == ref {
			return sb, nil
		}
	}
	return nil, notFound("no sandbox %q: see `agentbox ls`", ref)
}

// running is lookup for a sandbox that must run (409
// sandbox_not_running); m.mu must be held.
func (m *memState) running(ref string) (*api.Sandbox, error) {
	sb, err := m.lookup(ref)
	if err == nil && sb.State != api.StateRunning {
		err = api.Errorf(http.StatusConflict, api.CodeNotRunning, "sandbox %s is %s", sb.ID, sb.State)
	}
	return sb, err
}
