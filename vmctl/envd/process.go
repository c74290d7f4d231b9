package envd

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process/processconnect"
)

// processService is envd's process.Process over the sandbox service's
// detached processes (POST /v1/sandboxes/{id}/processes and friends,
// through vmctl/client):
//
//   - An E2B pid is the process's guest pid (api.Process.Pid), so `agentbox
//     ps` and `ps` in the guest show the same number. A request naming a
//     pid takes the running process with that pid, else (Connect only)
//     the newest ended one; nothing is kept to map them.
//   - A tag, and the config (envs, cwd) List answers, are what Start was
//     given; the service keeps them in memory by (sandbox, process ID),
//     so a daemon restart forgets them (List then shows cmd and args
//     only, and Connect by tag finds nothing).
//   - Start's process lives on when the stream ends early (the client
//     went away): it is a detached process, and Connect attaches to it
//     again. Its timeout is the request's deadline (Connect-Timeout-Ms,
//     the SDK's timeoutMs, 60 s by default); without one, the sandbox's
//     exec timeout applies.
//   - Streams start with start{pid}, carry the output as data events
//     (stdout and stderr, or pty for a process on a terminal), end with
//     end{exitCode, exited, status, error}, and send keepalive events at
//     the interval the client asks in the Keepalive-Ping-Interval header
//     (seconds).
type processService struct {
	processconnect.UnimplementedProcessHandler // StreamInput: the SDK does not use it

	c           *client.Client
	defaultUser string

	mu      sync.Mutex
	started map[procKey]startInfo
}

// procKey names a detached process: its sandbox and its ID in the API.
type procKey struct{ sandbox, id string }

// startInfo is what Start was given for a process.
type startInfo struct {
	config *process.ProcessConfig
	tag    string
}

func newProcessService(c *client.Client, o Options) *processService {
	return &processService{c: c, defaultUser: o.DefaultUser, started: map[procKey]startInfo{}}
}

// sandboxOf returns the sandbox of a request, which the front put in its
// context.
func sandboxOf(ctx context.Context) (string, error) {
	id := SandboxFrom(ctx)
	if id == "" {
		return "", errorf(connect.CodeInternal, "the request carries no sandbox (the E2B front must route it with WithSandbox)")
	}
	return id, nil
}

// Start implements process.Process/Start.
func (s *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	sb, err := sandboxOf(ctx)
	if err != nil {
		return err
	}
	cfg := req.Msg.GetProcess()
	if cfg.GetCmd() == "" {
		return errorf(connect.CodeInvalidArgument, "process.cmd is empty: give the program to run")
	}
	user, err := rpcUser(req.Header(), s.defaultUser)
	if err != nil {
		return err
	}
	er := api.ExecRequest{
		Cmd:       append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
		User:      user,
		StdinOpen: req.Msg.GetStdin(),
	}
	if cfg.GetCwd() != "" {
		// As envd: relative to the user's home, "~" expanded.
		res := &resolver{c: s.c, sb: sb, user: user}
		if er.Cwd, err = res.abs(ctx, cfg.GetCwd()); err != nil {
			return connectError(err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.GetEnvs())) {
		er.Env = append(er.Env, k+"="+cfg.GetEnvs()[k])
	}
	if req.Msg.Pty != nil {
		size := req.Msg.GetPty().GetSize()
		er.Tty = &api.TtySize{Rows: int(size.GetRows()), Cols: int(size.GetCols())}
	}
	if dl, ok := ctx.Deadline(); ok {
		er.TimeoutMs = max(time.Until(dl).Milliseconds(), 1)
	}
	p, err := s.c.StartProcess(ctx, sb, er)
	if err != nil {
		return connectError(err)
	}
	if p.Exit != nil && p.Exit.Error != "" {
		// It did not start: a missing cwd, user or program.
		return errorf(connect.CodeInvalidArgument, "%s", p.Exit.Error)
	}
	key := procKey{sb, p.ID}
	s.mu.Lock()
	s.started[key] = startInfo{config: cfg, tag: req.Msg.GetTag()}
	s.mu.Unlock()
	err = s.follow(ctx, req.Header(), sb, p, 0, func(ev *process.ProcessEvent) error {
		return stream.Send(&process.StartResponse{Event: ev})
	})
	if err == nil || ctx.Err() == nil {
		// It ended and the client was told, or the service failed the
		// stream: nobody will ask for it. A client that went away may
		// connect again while it runs (find forgets it once it ended).
		s.forget(key)
	}
	return err
}

// Connect implements process.Process/Connect: the stream of a running
// process (or the end of an ended one) from now on.
func (s *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	sb, p, err := s.lookup(ctx, req.Msg.GetProcess(), false)
	if err != nil {
		return err
	}
	return s.follow(ctx, req.Header(), sb, p, p.OutputBytes, func(ev *process.ProcessEvent) error {
		return stream.Send(&process.ConnectResponse{Event: ev})
	})
}

// List implements process.Process/List: the sandbox's running processes.
func (s *processService) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	sb, err := sandboxOf(ctx)
	if err != nil {
		return nil, err
	}
	list, err := s.c.ListProcesses(ctx, sb)
	if err != nil {
		return nil, connectError(err)
	}
	res := &process.ListResponse{Processes: []*process.ProcessInfo{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(sb, list)
	for _, p := range list {
		if p.State != api.ProcessRunning {
			continue
		}
		key := procKey{sb, p.ID}
		info := &process.ProcessInfo{Pid: uint32(p.Pid)}
		if st, ok := s.started[key]; ok {
			info.Config = st.config
			if st.tag != "" {
				info.Tag = &st.tag
			}
		} else if len(p.Cmd) > 0 {
			info.Config = &process.ProcessConfig{Cmd: p.Cmd[0], Args: p.Cmd[1:]}
		}
		res.Processes = append(res.Processes, info)
	}
	return connect.NewResponse(res), nil
}

// SendInput implements process.Process/SendInput: bytes to the process's
// stdin (started with stdin) or its terminal.
func (s *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	sb, p, err := s.lookup(ctx, req.Msg.GetProcess(), true)
	if err != nil {
		return nil, err
	}
	var data []byte
	switch in := req.Msg.GetInput().GetInput().(type) {
	case *process.ProcessInput_Stdin:
		data = in.Stdin
	case *process.ProcessInput_Pty:
		if p.Tty == nil {
			return nil, errorf(connect.CodeInvalidArgument, "process %d has no terminal: send its input as stdin", p.Pid)
		}
		data = in.Pty
	default:
		return nil, errorf(connect.CodeInvalidArgument, "input is empty: give stdin or pty bytes")
	}
	if _, err := s.c.WriteStdin(ctx, sb, p.ID, bytes.NewReader(data), false); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

// SendSignal implements process.Process/SendSignal (SIGTERM or SIGKILL to
// the process's group).
func (s *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	sb, err := sandboxOf(ctx)
	if err != nil {
		return nil, err
	}
	var sig string
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGTERM:
		sig = "TERM"
	case process.Signal_SIGNAL_SIGKILL:
		sig = "KILL"
	default:
		return nil, errorf(connect.CodeInvalidArgument, "signal %v: give SIGNAL_SIGTERM or SIGNAL_SIGKILL", req.Msg.GetSignal())
	}
	p, err := s.find(ctx, sb, req.Msg.GetProcess(), true)
	if err != nil {
		return nil, err
	}
	if err := s.c.KillProcess(ctx, sb, p.ID, sig); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

// CloseStdin implements process.Process/CloseStdin.
func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	sb, p, err := s.lookup(ctx, req.Msg.GetProcess(), true)
	if err != nil {
		return nil, err
	}
	if _, err := s.c.WriteStdin(ctx, sb, p.ID, nil, true); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

// Update implements process.Process/Update: the size of the process's
// terminal.
func (s *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	sb, p, err := s.lookup(ctx, req.Msg.GetProcess(), true)
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty != nil {
		size := req.Msg.GetPty().GetSize()
		if _, err := s.c.ResizeProcess(ctx, sb, p.ID, api.TtySize{Rows: int(size.GetRows()), Cols: int(size.GetCols())}); err != nil {
			return nil, connectError(err)
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

// lookup returns the sandbox of the request (sandboxOf) and the process
// sel names in it (find).
func (s *processService) lookup(ctx context.Context, sel *process.ProcessSelector, running bool) (string, api.Process, error) {
	sb, err := sandboxOf(ctx)
	if err != nil {
		return "", api.Process{}, err
	}
	p, err := s.find(ctx, sb, sel, running)
	return sb, p, err
}

// find returns the process sel names in sandbox sb: by pid the running
// process with that guest pid, by tag the running one Start was given the
// tag for; unless running, an ended one when none runs (the newest).
// Errors: not_found, invalid_argument for an empty selector, the API's.
func (s *processService) find(ctx context.Context, sb string, sel *process.ProcessSelector, running bool) (api.Process, error) {
	var match func(api.Process) bool
	var what string
	switch v := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		match = func(p api.Process) bool { return p.Pid != 0 && uint32(p.Pid) == v.Pid }
		what = "pid " + strconv.FormatUint(uint64(v.Pid), 10)
	case *process.ProcessSelector_Tag:
		s.mu.Lock()
		ids := map[string]bool{}
		for key, st := range s.started {
			if key.sandbox == sb && st.tag == v.Tag {
				ids[key.id] = true
			}
		}
		s.mu.Unlock()
		match = func(p api.Process) bool { return ids[p.ID] }
		what = "tag " + v.Tag
	default:
		return api.Process{}, errorf(connect.CodeInvalidArgument, "process selector is empty: give a pid or a tag")
	}
	list, err := s.c.ListProcesses(ctx, sb)
	if err != nil {
		return api.Process{}, connectError(err)
	}
	s.mu.Lock()
	s.pruneLocked(sb, list)
	s.mu.Unlock()
	var ended *api.Process
	for i := len(list) - 1; i >= 0; i-- { // newest first
		p := list[i]
		if !match(p) {
			continue
		}
		if p.State == api.ProcessRunning {
			return p, nil
		}
		if ended == nil {
			ended = &list[i]
		}
	}
	if ended != nil && !running {
		return *ended, nil
	}
	return api.Process{}, errorf(connect.CodeNotFound, "process with %s not found", what)
}

// pruneLocked drops what Start kept of the processes of sandbox sb that
// list, the sandbox's processes, does not show running: those that ended
// while no stream followed them. s.mu is held.
func (s *processService) pruneLocked(sb string, list []api.Process) {
	running := map[string]bool{}
	for _, p := range list {
		if p.State == api.ProcessRunning {
			running[p.ID] = true
		}
	}
	for key := range s.started {
		if key.sandbox == sb && !running[key.id] {
			delete(s.started, key)
		}
	}
}

// forget drops what Start kept of a process.
func (s *processService) forget(key procKey) {
	s.mu.Lock()
	delete(s.started, key)
	s.mu.Unlock()
}
