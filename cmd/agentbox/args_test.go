package main

import (
	"bytes"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
)

func TestParseCpArg(t *testing.T) {
	cases := []struct {
		in   string
		want cpEnd
		err  string
	}{
		{in: "w1:/work/a.txt", want: cpEnd{sandbox: "w1", path: "/work/a.txt"}},
		{in: "0123456789ab:/", want: cpEnd{sandbox: "0123456789ab", path: "/"}},
		{in: "w1:/work/", want: cpEnd{sandbox: "w1", path: "/work/"}},
		{in: "w1:/a:b", want: cpEnd{sandbox: "w1", path: "/a:b"}},
		// A drive-letter look-alike is a sandbox named C on Linux.
		{in: "C:/x", want: cpEnd{sandbox: "C", path: "/x"}},
		{in: "data.csv", want: cpEnd{path: "data.csv"}},
		{in: "-", want: cpEnd{path: "-"}},
		{in: "./a:b", want: cpEnd{path: "./a:b"}},
		{in: "/tmp/a:b", want: cpEnd{path: "/tmp/a:b"}},
		{in: ":b", want: cpEnd{path: ":b"}},
		{in: "my file:x", want: cpEnd{path: "my file:x"}},
		{in: "w1:work/a", err: `"w1:work/a": the guest path must be absolute: w1:/path/to/file`},
		{in: "w1:", err: `"w1:": the guest path must be absolute: w1:/path/to/file`},
		{in: "C:x", err: `"C:x": the guest path must be absolute: C:/path/to/file`},
		{in: "", err: "empty path: usage: " + cpUsage},
	}
	for _, tc := range cases {
		got, err := parseCpArg(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("parseCpArg(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseCpArg(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	want := "exactly one of SRC and DST must be SANDBOX:/path, the other local: usage: " + cpUsage
	for _, pair := range [][2]string{{"a", "b"}, {"w1:/a", "w2:/b"}, {"-", "-"}} {
		if _, _, err := parseCpArgs(pair[0], pair[1]); err == nil || err.Error() != want {
			t.Errorf("parseCpArgs(%q, %q) error %v", pair[0], pair[1], err)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]int{"0644": 0o644, "755": 0o755, "0": 0, "0777": 0o777} {
		if got, err := parseMode(in); err != nil || int(got) != want {
			t.Errorf("parseMode(%q) = %o, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "0800", "01777", "rw", "-1"} {
		if _, err := parseMode(in); err == nil {
			t.Errorf("parseMode(%q): no error", in)
		}
	}
}

func TestParseLabels(t *testing.T) {
	got, err := parseLabels([]string{"team=a", "empty=", "eq=a=b"})
	if want := map[string]string{"team": "a", "empty": "", "eq": "a=b"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("parseLabels = %v, %v; want %v", got, err, want)
	}
	if got, err := parseLabels(nil); got != nil || err != nil {
		t.Errorf("parseLabels(nil) = %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"team":    `--label "team": want KEY=VALUE`,
		"=v":      `--label "=v": want KEY=VALUE`,
		"k=1,k=2": "",
	} {
		_, err := parseLabels([]string{in})
		if want == "" {
			if err != nil {
				t.Errorf("parseLabels(%q): %v", in, err)
			}
			continue
		}
		if err == nil || err.Error() != want {
			t.Errorf("parseLabels(%q) error %v, want %q", in, err, want)
		}
	}
	if _, err := parseLabels([]string{"k=1", "k=2"}); err == nil || err.Error() != `--label "k=2": key "k" given twice` {
		t.Errorf("duplicate key: %v", err)
	}
}

func TestGuestStatus(t *testing.T) {
	cases := []struct {
		st      api.ExitStatus
		timeout time.Duration
		code    int
		msg     string
	}{
		{api.ExitStatus{}, 0, 0, ""},
		{api.ExitStatus{ExitCode: 42}, 0, 42, ""},
		{api.ExitStatus{ExitCode: 137, Signal: 9}, 0, 137, ""},
		{api.ExitStatus{ExitCode: 143, Signal: 15}, 0, 143, ""},
		{api.ExitStatus{ExitCode: 124, Signal: 9, TimedOut: true}, 5 * time.Second, 124, "command timed out after 5s and was killed"},
		{api.ExitStatus{ExitCode: 124, TimedOut: true}, 0, 124, "command timed out after the sandbox's command timeout and was killed"},
		// The daemon's word wins: a policy capped the 10s asked for to 3s.
		{api.ExitStatus{ExitCode: 124, TimedOut: true, TimeoutMs: 3000}, 10 * time.Second, 124, "command timed out after 3s and was killed"},
		{api.ExitStatus{ExitCode: 124, TimedOut: true, TimeoutMs: 1500}, 0, 124, "command timed out after 1.5s and was killed"},
		{api.ExitStatus{ExitCode: 127, Error: "x: command not found"}, 0, 127, "x: command not found"},
		{api.ExitStatus{ExitCode: 126, Error: "/x: permission denied"}, 0, 126, "/x: permission denied"},
		{api.ExitStatus{ExitCode: 125, Error: "fork failed"}, 0, 125, "fork failed"},
		{api.ExitStatus{Error: "odd"}, 0, 125, "odd"},
	}
	for _, tc := range cases {
		if code, msg := guestStatus(tc.st, tc.timeout); code != tc.code || msg != tc.msg {
			t.Errorf("guestStatus(%+v) = %d, %q; want %d, %q", tc.st, code, msg, tc.code, tc.msg)
		}
	}
	if err := exitFor(0, ""); err != nil {
		t.Errorf("exitFor(0) = %v", err)
	}
	if err := exitFor(3, ""); err == nil || exitCode(err, nopWriter{}) != 3 {
		t.Errorf("exitFor(3) = %v", err)
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

func TestShellJoin(t *testing.T) {
	if got, want := shellJoin([]string{"sh", "-c", "echo 'hi' $X", "", "a=b/c.d", "l1\n'l2'\t\\\x01\u0085é"}), `sh -c 'echo '\''hi'\'' $X' '' a=b/c.d $'l1\n\'l2\'\t\\\x01\u0085é'`; got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{-time.Second: "0s", 59 * time.Second: "59s", 90 * time.Second: "1m", 3 * time.Hour: "3h", 47 * time.Hour: "47h", 72 * time.Hour: "3d"} {
		if got := age(d); got != want {
			t.Errorf("age(%s) = %s, want %s", d, got, want)
		}
	}
}

func TestWholeSecondsAndCreateRequest(t *testing.T) {
	d := startDaemon(t)
	for args, want := range map[string]string{
		"--idle-timeout=-5s": "agentbox: --idle-timeout -5s: must be positive\n",
		"--max-execs=-1":     "agentbox: --max-execs -1: must be positive\n",
		"--accel=fast":       "",
		"--exec-timeout=-1s": "agentbox: --exec-timeout -1s: must be positive\n",
		"--boot-timeout=-1s": "agentbox: --boot-timeout -1s: must be positive\n",
	} {
		r := d.cli(t, nil, "create", "--image", "/img", args)
		if r.code != 125 || (want != "" && r.stderr != want) || len(d.mem.Creates()) != 0 {
			t.Errorf("create %s: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	d.cli(t, nil, "create").check(t, 125, "", "agentbox: no image: pass --image DIR (or set AGENTBOX_IMAGE), or a profile of the flake: `agentbox create [FLAGS] PROFILE` (see `agentbox profile ls`); `make test-image` builds an image\n")
}

// TestFlagValueHints: a value a flag cannot parse is named as typed
// (--flag) and gets the hint its flag's type wants.
func TestFlagValueHints(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--timeout", "5", "--", "true"}, `invalid value "5" for flag --timeout: parse error (durations take a unit: 500ms, 30s, 5m): see ` + "`agentbox run --help`"},
		{[]string{"run", "--memory", "abc", "--", "true"}, `invalid value "abc" for flag --memory: parse error (want a whole number): see ` + "`agentbox run --help`"},
		{[]string{"exec", "-x", "x", "w1", "--", "true"}, "flag provided but not defined: -x: see `agentbox exec --help`"},
	}
	for _, tc := range cases {
		app := newApp()
		var stderr bytes.Buffer
		app.Writer, app.ErrWriter = io.Discard, &stderr
		err := app.Run(append([]string{"agentbox", "--config", ""}, tc.args...))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
