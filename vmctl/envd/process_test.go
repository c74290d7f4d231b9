package envd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/envd"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process/processconnect"
	"github.com/agentbox/agentbox/vmctl/host"
)

// guestServer starts the sandbox service in this process (a local vmctl/host,
// as `agentbox run --local` does), a sandbox of the test image, and the
// data plane over it on an HTTP test server whose requests are routed to
// that sandbox; it returns the server's URL.
func guestServer(t *testing.T) string {
	t.Helper()
	img := testenv.Image(t)
	state, runtime := testenv.ShortTempDir(t), testenv.ShortTempDir(t)
	run := make([]byte, 8)
	rand.Read(run)
	ctx := context.Background()
	svc, err := host.Start(ctx, host.Options{URI: testenv.URI(), StateDir: state, RuntimeDir: runtime, Local: &host.LocalOptions{RunID: hex.EncodeToString(run)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("closing the service: %v", err)
		}
		testenv.AssertNoLeaks(t, state, runtime)
	})
	sb, err := svc.Client.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img})
	if err != nil {
		t.Fatal(err)
	}
	h := envd.NewHandler(svc.Client, envd.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(envd.WithSandbox(r.Context(), sb.ID)))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// codecs are the two encodings E2B's SDK and other Connect clients use.
var codecs = []struct {
	name string
	opts []connect.ClientOption
}{
	{"json", []connect.ClientOption{connect.WithProtoJSON()}},
	{"proto", nil},
}

// stream is what a Start or Connect stream delivered.
type stream struct {
	pid                 uint32
	stdout, stderr, pty bytes.Buffer
	end                 *process.ProcessEvent_EndEvent
	keepalives          int
}

// next returns the next event of s, nil at its end (s.Err() says why).
func next[T any, PT interface {
	*T
	GetEvent() *process.ProcessEvent
}](s *connect.ServerStreamForClient[T]) *process.ProcessEvent {
	if !s.Receive() {
		return nil
	}
	return PT(s.Msg()).GetEvent()
}

// add records ev in st; it fails the test for a second start event or an
// event after end.
func (st *stream) add(t *testing.T, ev *process.ProcessEvent, first bool) {
	t.Helper()
	if st.end != nil {
		t.Fatalf("event after end: %v", ev)
	}
	switch {
	case ev.GetStart() != nil:
		if !first {
			t.Fatalf("start event not first: %v", ev)
		}
		st.pid = ev.GetStart().GetPid()
		return
	case first:
		t.Fatalf("first event is not start: %v", ev)
	case ev.GetData() != nil:
		d := ev.GetData()
		st.stdout.Write(d.GetStdout())
		st.stderr.Write(d.GetStderr())
		st.pty.Write(d.GetPty())
	case ev.GetEnd() != nil:
		st.end = ev.GetEnd()
	case ev.GetKeepalive() != nil:
		st.keepalives++
	default:
		t.Fatalf("empty event: %v", ev)
	}
}

// collect reads s to its end.
func collect[T any, PT interface {
	*T
	GetEvent() *process.ProcessEvent
}](t *testing.T, s *connect.ServerStreamForClient[T]) (*stream, error) {
	t.Helper()
	st := &stream{}
	for first := true; ; first = false {
		ev := next[T, PT](s)
		if ev == nil {
			break
		}
		st.add(t, ev, first)
	}
	if err := s.Err(); err != nil {
		return st, err
	}
	if st.end == nil {
		t.Fatal("the stream ended without an end event")
	}
	return st, nil
}

// bash is the command E2B's commands.run sends for cmd.
func bash(cmd string) *process.ProcessConfig {
	return &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}}
}

// basicUser is the Authorization header E2B's SDK sends to run as name.
func basicUser(name string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"))
}

func start(t *testing.T, pc processconnect.ProcessClient, req *process.StartRequest, user string) (*stream, error) {
	t.Helper()
	r := connect.NewRequest(req)
	if user != "" {
		r.Header().Set("Authorization", basicUser(user))
	}
	s, err := pc.Start(t.Context(), r)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return collect(t, s)
}

func wantCode(t *testing.T, what string, err error, code connect.Code, msg string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code || (msg != "" && ce.Message() != msg) {
		t.Errorf("%s: got %v, want %v %q", what, err, code, msg)
	}
}

func strp(s string) *string { return &s }

func boolp(b bool) *bool { return &b }

// TestProcessGuest drives process.Process over a real daemon and TCG
// guest with both codecs: output, exit codes, env, cwd, users, a
// background process found by tag and pid then killed, stdin, a
// terminal, keepalives, the request's deadline, and the errors.
func TestProcessGuest(t *testing.T) {
	url := guestServer(t)
	for _, cd := range codecs {
		t.Run(cd.name, func(t *testing.T) {
			pc := processconnect.NewProcessClient(http.DefaultClient, url, cd.opts...)
			testRun(t, pc)
			testBackground(t, pc)
			testStdin(t, pc)
			testPty(t, pc)
		})
	}
	pc := processconnect.NewProcessClient(http.DefaultClient, url, connect.WithProtoJSON())
	testKeepaliveDeadline(t, pc)
	testErrors(t, pc)
}

func testRun(t *testing.T, pc processconnect.ProcessClient) {
	st, err := start(t, pc, &process.StartRequest{Process: bash("echo out; echo err >&2; exit 3")}, "")
	if err != nil {
		t.Fatal(err)
	}
	want := &process.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: "exit status 3", Error: strp("exit status 3")}
	if st.pid == 0 || st.stdout.String() != "out\n" || st.stderr.String() != "err\n" || st.end.String() != want.String() {
		t.Errorf("run: pid %d stdout %q stderr %q end %v, want end %v", st.pid, st.stdout.String(), st.stderr.String(), st.end, want)
	}
	st, err = start(t, pc, &process.StartRequest{Process: bash("true")}, "")
	if err != nil || st.end.GetExitCode() != 0 || !st.end.GetExited() || st.end.Error != nil || st.end.GetStatus() != "exit status 0" {
		t.Errorf("true: %v %v", st.end, err)
	}

	// env and cwd
	cfg := bash(`echo "$FOO|$BAR|$(pwd)"`)
	cfg.Envs, cfg.Cwd = map[string]string{"FOO": "foo value", "BAR": "b=r"}, strp("/tmp")
	st, err = start(t, pc, &process.StartRequest{Process: cfg}, "")
	if err != nil || st.stdout.String() != "foo value|b=r|/tmp\n" {
		t.Errorf("env, cwd: %q %v", st.stdout.String(), err)
	}

	// users: the default ("user", as the SDK from envd 0.4.0 on), named.
	who := bash(`echo "$(id -u) $(id -g) $HOME $USER $(pwd)"`)
	for _, tc := range []struct{ user, want string }{
		{"", "1000 1000 /home/user user /home/user\n"},
		{"user", "1000 1000 /home/user user /home/user\n"},
		{"root", "0 0 /root root /root\n"},
	} {
		st, err := start(t, pc, &process.StartRequest{Process: who}, tc.user)
		if err != nil || st.stdout.String() != tc.want {
			t.Errorf("user %q: %q %v, want %q", tc.user, st.stdout.String(), err, tc.want)
		}
	}
}

func testBackground(t *testing.T, pc processconnect.ProcessClient) {
	ctx, cancel := context.WithCancel(t.Context())
	s, err := pc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: bash("echo started; sleep 600"), Tag: strp("bg")}))
	if err != nil {
		t.Fatal(err)
	}
	ev := next(s)
	pid := ev.GetStart().GetPid()
	if pid == 0 {
		t.Fatalf("first event %v", ev)
	}
	// The client goes away: the process runs on.
	cancel()
	s.Close()

	list, err := pc.List(t.Context(), connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var found *process.ProcessInfo
	for _, p := range list.Msg.GetProcesses() {
		if p.GetPid() == pid {
			found = p
		}
	}
	if found == nil || found.GetTag() != "bg" || found.GetConfig().GetCmd() != "/bin/bash" || strings.Join(found.GetConfig().GetArgs(), " ") != "-l -c echo started; sleep 600" {
		t.Fatalf("list: %v (pid %d)", list.Msg, pid)
	}

	// Connect by tag sees it from now on, and its end when killed by pid.
	cs, err := pc.Connect(t.Context(), connect.NewRequest(&process.ConnectRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "bg"}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ev = next(cs)
	if ev.GetStart().GetPid() != pid {
		t.Fatalf("connect: first event %v, want start %d", ev, pid)
	}
	byPid := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	if _, err := pc.SendSignal(t.Context(), connect.NewRequest(&process.SendSignalRequest{Process: byPid, Signal: process.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	st := &stream{pid: pid}
	for ev := next(cs); ev != nil; ev = next(cs) {
		st.add(t, ev, false)
	}
	want := &process.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: strp("signal: killed")}
	if cs.Err() != nil || st.end.String() != want.String() || st.stdout.Len() != 0 {
		t.Errorf("connect: end %v, stdout %q, err %v; want %v and no output (it came before connect)", st.end, st.stdout.String(), cs.Err(), want)
	}
	// Gone: signals and input say not_found (the SDK's kill answers false).
	_, err = pc.SendSignal(t.Context(), connect.NewRequest(&process.SendSignalRequest{Process: byPid, Signal: process.Signal_SIGNAL_SIGTERM}))
	wantCode(t, "signal after the end", err, connect.CodeNotFound, "process with pid "+itoa(pid)+" not found")
	list, err = pc.List(t.Context(), connect.NewRequest(&process.ListRequest{}))
	if err != nil || len(list.Msg.GetProcesses()) != 0 {
		t.Errorf("list after kill: %v %v", list, err)
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

func testStdin(t *testing.T, pc processconnect.ProcessClient) {
	s, err := pc.Start(t.Context(), connect.NewRequest(&process.StartRequest{Process: bash("cat; echo done"), Stdin: boolp(true)}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := &stream{}
	st.add(t, next(s), true)
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: st.pid}}
	for _, in := range []string{"hello\n", "world\n"} {
		if _, err := pc.SendInput(t.Context(), connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte(in)}}})); err != nil {
			t.Fatal(err)
		}
	}
	// Input for a terminal it does not have is refused.
	_, err = pc.SendInput(t.Context(), connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte("x")}}}))
	wantCode(t, "pty input without a terminal", err, connect.CodeInvalidArgument, "process "+itoa(st.pid)+" has no terminal: send its input as stdin")
	if _, err := pc.CloseStdin(t.Context(), connect.NewRequest(&process.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	for ev := next(s); ev != nil; ev = next(s) {
		st.add(t, ev, false)
	}
	if s.Err() != nil || st.stdout.String() != "hello\nworld\ndone\n" || st.end.GetExitCode() != 0 || !st.end.GetExited() {
		t.Errorf("stdin: %q %v %v", st.stdout.String(), st.end, s.Err())
	}
}

func testPty(t *testing.T, pc processconnect.ProcessClient) {
	s, err := pc.Start(t.Context(), connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "stty size; read line; stty size; echo got:$line"}},
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := &stream{}
	st.add(t, next(s), true)
	for !strings.Contains(st.pty.String(), "\n") {
		ev := next(s)
		if ev == nil {
			t.Fatalf("stream ended before the first size: %q %v", st.pty.String(), s.Err())
		}
		st.add(t, ev, false)
	}
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: st.pid}}
	if _, err := pc.Update(t.Context(), connect.NewRequest(&process.UpdateRequest{Process: sel, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 100, Rows: 30}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.SendInput(t.Context(), connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte("x\n")}}})); err != nil {
		t.Fatal(err)
	}
	for ev := next(s); ev != nil; ev = next(s) {
		st.add(t, ev, false)
	}
	if want := "24 80\r\nx\r\n30 100\r\ngot:x\r\n"; s.Err() != nil || st.pty.String() != want || st.stdout.Len() != 0 || st.end.GetExitCode() != 0 {
		t.Errorf("pty: %q %v %v, want %q", st.pty.String(), st.end, s.Err(), want)
	}
}

func testKeepaliveDeadline(t *testing.T, pc processconnect.ProcessClient) {
	r := connect.NewRequest(&process.StartRequest{Process: bash("sleep 3")})
	r.Header().Set("Keepalive-Ping-Interval", "1")
	s, err := pc.Start(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	st, err := collect(t, s)
	s.Close()
	if err != nil || st.keepalives < 1 || st.end.GetExitCode() != 0 {
		t.Errorf("keepalive: %d keepalives, end %v, %v", st.keepalives, st.end, err)
	}

	// The request's deadline (the SDK's timeoutMs) bounds the command.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	s, err = pc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: bash("sleep 600"), Tag: strp("deadline")}))
	if err == nil {
		_, err = collect(t, s)
		s.Close()
	}
	wantCode(t, "past the deadline", err, connect.CodeDeadlineExceeded, "")
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := pc.List(t.Context(), connect.NewRequest(&process.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Msg.GetProcesses()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command outlived its deadline: %v", list.Msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func testErrors(t *testing.T, pc processconnect.ProcessClient) {
	cfg := bash("true")
	cfg.Cwd = strp("/nonexistent")
	_, err := start(t, pc, &process.StartRequest{Process: cfg}, "")
	wantCode(t, "missing cwd", err, connect.CodeInvalidArgument, "working directory /nonexistent: no such file or directory")
	_, err = start(t, pc, &process.StartRequest{Process: bash("true")}, "nosuchuser")
	wantCode(t, "unknown user", err, connect.CodeInvalidArgument, "user nosuchuser: no such user in the guest's /etc/passwd")
	_, err = start(t, pc, &process.StartRequest{Process: &process.ProcessConfig{}}, "")
	wantCode(t, "empty cmd", err, connect.CodeInvalidArgument, "process.cmd is empty: give the program to run")
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 999999}}
	_, err = pc.SendSignal(t.Context(), connect.NewRequest(&process.SendSignalRequest{Process: sel}))
	wantCode(t, "no signal", err, connect.CodeInvalidArgument, "signal SIGNAL_UNSPECIFIED: give SIGNAL_SIGTERM or SIGNAL_SIGKILL")
	s, err := pc.Connect(t.Context(), connect.NewRequest(&process.ConnectRequest{Process: sel}))
	if err == nil {
		_, err = collect(t, s)
		s.Close()
	}
	wantCode(t, "connect to a missing pid", err, connect.CodeNotFound, "process with pid 999999 not found")
	_, err = pc.CloseStdin(t.Context(), connect.NewRequest(&process.CloseStdinRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "nope"}}}))
	wantCode(t, "close stdin of a missing tag", err, connect.CodeNotFound, "process with tag nope not found")
	_, err = pc.Update(t.Context(), connect.NewRequest(&process.UpdateRequest{}))
	wantCode(t, "empty selector", err, connect.CodeInvalidArgument, "process selector is empty: give a pid or a tag")
}
