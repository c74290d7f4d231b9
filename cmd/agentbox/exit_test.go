package main

import (
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

func TestStatusCode(t *testing.T) {
	cases := []struct {
		st   agentproto.ExitStatus
		code int
	}{
		{agentproto.ExitStatus{Code: 0}, 0},
		{agentproto.ExitStatus{Code: 42}, 42},
		{agentproto.ExitStatus{Code: -1, Signal: 9}, 137},
		{agentproto.ExitStatus{Code: -1, Signal: 15}, 143},
		{agentproto.ExitStatus{Code: -1, Signal: 9, TimedOut: true}, 124},
		{agentproto.ExitStatus{Code: -1, ErrorKind: agentproto.ExecNotFound, Error: "x: command not found"}, 127},
		{agentproto.ExitStatus{Code: -1, ErrorKind: agentproto.ExecPermission}, 126},
		{agentproto.ExitStatus{Code: -1, ErrorKind: agentproto.ExecNotExecutable}, 126},
		{agentproto.ExitStatus{Code: -1, ErrorKind: agentproto.ExecBadWorkdir}, 126},
	}
	for _, tc := range cases {
		if got, _ := statusCode(tc.st, time.Second); got != tc.code {
			t.Errorf("statusCode(%+v) = %d, want %d", tc.st, got, tc.code)
		}
	}
	if code, msg := statusCode(agentproto.ExitStatus{Code: -1, ErrorKind: agentproto.ExecNotFound, Error: "x: command not found"}, 0); code != 127 || msg != "x: command not found" {
		t.Errorf("not-found message %q", msg)
	}
}
