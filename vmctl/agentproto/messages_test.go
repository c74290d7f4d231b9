package agentproto

import (
	"errors"
	"io/fs"
	"testing"
)

func TestShellCode(t *testing.T) {
	cases := []struct {
		s    ExitStatus
		want int
	}{
		{ExitStatus{Code: 0}, 0},
		{ExitStatus{Code: 42}, 42},
		{ExitStatus{Code: -1, Signal: 9}, 137},
		{ExitStatus{Code: -1, Signal: 9, TimedOut: true}, 124},
		{ExitStatus{Code: -1, ErrorKind: ExecNotFound}, 127},
		{ExitStatus{Code: -1, ErrorKind: ExecPermission}, 126},
		{ExitStatus{Code: -1, ErrorKind: ExecNotExecutable}, 126},
		{ExitStatus{Code: -1, ErrorKind: ExecBadWorkdir}, 126},
	}
	for _, c := range cases {
		if got := c.s.ShellCode(); got != c.want {
			t.Errorf("%+v: got %d, want %d", c.s, got, c.want)
		}
	}
	err := ExitStatus{Code: -1, ErrorKind: ExecNotFound, Error: "python4: command not found"}.Err()
	var ee *ExecError
	if !errors.As(err, &ee) || ee.Kind != ExecNotFound || err.Error() != "python4: command not found" || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v", err)
	}
	if (ExitStatus{Code: 3}).Err() != nil {
		t.Fatal("Err of a started command is not nil")
	}
}

func TestErrorIs(t *testing.T) {
	var err error = &Error{Code: CodeNotFound, Message: "/x"}
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist) || !errors.Is(err, &Error{Code: CodeNotFound}) {
		t.Fatal("Is mismatch")
	}
	if err.Error() != "guest: not-found: /x" {
		t.Fatalf("message %q", err.Error())
	}
}

func TestValidate(t *testing.T) {
	bad := []Request{
		{Op: "nope"},
		{Op: OpExec},
		{Op: OpExec, Exec: &ExecRequest{}},
		{Op: OpExec, Exec: &ExecRequest{Argv: []string{"a\x00"}}},
		{Op: OpExec, Exec: &ExecRequest{Argv: []string{"a"}, Env: []string{"NOEQ"}}},
		{Op: OpExec, Exec: &ExecRequest{Argv: []string{"a"}, Dir: "rel"}},
		{Op: OpExec, Exec: &ExecRequest{Argv: []string{"a"}, TimeoutMs: -1}},
		{Op: OpStat},
		{Op: OpConnect},
		{Op: OpConnect, Connect: &ConnectRequest{Port: 0}},
		{Op: OpConnect, Connect: &ConnectRequest{Port: 65536}},
	}
	for _, r := range bad {
		if err := r.Validate(); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("%+v: got %v", r, err)
		}
	}
	good := []Request{
		{Op: OpPing},
		{Op: OpConnect, Connect: &ConnectRequest{Port: 8000}},
		{Op: OpExec, Exec: &ExecRequest{Argv: []string{"a b", ""}, Env: []string{"A="}, Dir: "/tmp"}},
		{Op: OpStat, Path: &PathRequest{Path: "/"}},
	}
	for _, r := range good {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	if p, err := CleanPath("/a/../b//c/"); err != nil || p != "/b/c" {
		t.Fatalf("CleanPath = %q, %v", p, err)
	}
	if _, err := CleanPath("a/b"); !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("relative: %v", err)
	}
}
