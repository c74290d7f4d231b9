package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestCLIAttach(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "create", "--image", "/img", "--name", "w1").check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "exec", "-d", "w1", "--", "out", "hello\n", "oops\n", "4").check(t, 0, "p1\n", "")
	// Its output from offset 2, then its exit status.
	d.cli(t, nil, "attach", "--offset", "2", "w1", "p1").check(t, 4, "llo\n", "oops\n")
	d.cli(t, nil, "attach", "w1", "p9").check(t, 125, "", "agentbox: no process \"p9\" in sandbox 000000abc001\n")
	d.cli(t, nil, "attach", "--offset", "-1", "w1", "p1").check(t, 125, "", "agentbox: --offset -1: must be 0 or more\n")
	d.cli(t, nil, "attach", "-it", "w1", "p1").check(t, 125, "", "agentbox: -t needs a terminal on stdin: run it from one, or drop -t to pipe stdin (-i)\n")
	d.cli(t, nil, "attach", "w1").check(t, 125, "", "agentbox: want 2 argument(s), got 1: usage: agentbox attach [-i] [-t] [--offset N] SANDBOX PROCESS\n")
}

func TestDetachKeys(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		detached       bool
	}{
		{"plain", "ls -l\r", "ls -l\r", false},
		{"ctrl-p ctrl-q", "ab\x10\x11cd", "ab", true},
		{"ctrl-p then another key", "a\x10b\x10\x10\x11", "a\x10b\x10", true},
		{"a lone ctrl-p at the end is held", "x\x10", "x", false},
		{"ctrl-q alone", "\x11q", "\x11q", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, oneByte := range []bool{false, true} {
				detached := false
				var r io.Reader = strings.NewReader(c.in)
				if oneByte {
					r = iotest.OneByteReader(r)
				}
				got, err := io.ReadAll(&detachKeys{r: r, detach: func() { detached = true }})
				if err != nil || !bytes.Equal(got, []byte(c.want)) || detached != c.detached {
					t.Fatalf("one byte %v: got %q, %v, detached %v; want %q, detached %v", oneByte, got, err, detached, c.want, c.detached)
				}
			}
		})
	}
}
