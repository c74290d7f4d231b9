package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/audit"
)

func TestTerminalText(t *testing.T) {
	in := "\x1b]0;root@box: ~\a\x1b[?2004hroot@box:~# ls\r\n\x1b[0m\x1b[01;34mwork\x1b[0m  a.txt\r\n" +
		"progress 10%\rprogress 100%\r\nabx\bc\r\n\x1b(Bdone ünï\r\n\r\n"
	got := terminalText([]byte(in))
	want := []string{"root@box:~# ls", "work  a.txt", "progress 100%", "abc", "done ünï"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestReplayTtySession(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	code := 3
	e := audit.Entry{Time: t0, Sandbox: "000000abc001", Caller: "uid:0", Action: audit.ActionExec, ExecID: "e000002",
		Args: map[string]any{"cmd": []any{"bash"}, "tty": "24x80"}, ExitCode: &code, DurationMs: 1500,
		Tty: &audit.TtySession{Rows: 24, Cols: 80, Chunks: []audit.TtyChunk{
			{Ms: 0, Dir: audit.TtyOutput, Data: []byte("\x1b[01;32m$\x1b[0m ")},
			{Ms: 300, Dir: audit.TtyInput, Data: []byte("exit 3\r")},
			{Ms: 310, Dir: audit.TtyOutput, Data: []byte("exit 3\r\nexit\r\n")},
			{Ms: 400, Dir: audit.TtyResize, Rows: 30, Cols: 100},
		}}}
	var b bytes.Buffer
	if err := writeReplay(&b, []audit.Entry{e}, replayOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"│ $ exit 3\n", "│ exit\n", "typed: exit 3\\x0d\n", "terminal 24x80; play it: agentbox audit --play e000002 000000abc001\n", "exit 3  1.5s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("replay lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "\x1b") {
		t.Errorf("escape sequences reached the timeline:\n%q", b.String())
	}

	var out bytes.Buffer
	if err := playTty(context.Background(), &out, e.Tty, 0); err != nil {
		t.Fatal(err)
	}
	if out.String() != "\x1b[01;32m$\x1b[0m exit 3\r\nexit\r\n" {
		t.Errorf("played %q", out.String())
	}
}
