package profile

import (
	"reflect"
	"strings"
	"testing"
)

func TestSplitArgs(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		err  string
	}{
		{in: "", want: nil},
		{in: "  \t\n ", want: nil},
		{in: "--option substituters '' --option build-users-group ''",
			want: []string{"--option", "substituters", "", "--option", "build-users-group", ""}},
		{in: `--option extra-sandbox-paths /bin/sh=/bin/busybox`, want: []string{"--option", "extra-sandbox-paths", "/bin/sh=/bin/busybox"}},
		{in: `a'b c'd "e \"f\" \$g \h" i\ j`, want: []string{"ab cd", `e "f" $g \h`, "i j"}},
		{in: `""`, want: []string{""}},
		{in: `'it''s'`, want: []string{"its"}},
		{in: "'unclosed", err: "unclosed '"},
		{in: `"unclosed`, err: `unclosed "`},
		{in: `trailing\`, err: "trailing backslash"},
	}
	for _, tc := range cases {
		got, err := SplitArgs(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("SplitArgs(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitArgs(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestNixArgsFromEnv(t *testing.T) {
	t.Setenv(NixArgsEnv, "--option sandbox false")
	got, err := NixArgsFromEnv()
	if err != nil || !reflect.DeepEqual(got, []string{"--option", "sandbox", "false"}) {
		t.Fatalf("got %q, %v", got, err)
	}
	t.Setenv(NixArgsEnv, "'")
	if _, err := NixArgsFromEnv(); err == nil || !strings.HasPrefix(err.Error(), "$AGENTBOX_NIX_ARGS: unclosed '") {
		t.Fatalf("err = %v", err)
	}
}

func TestLineTail(t *testing.T) {
	lt := &lineTail{max: 3}
	for _, chunk := range []string{"one\ntw", "o\r\n\nthree\nfour", "\nfi", "ve"} {
		lt.Write([]byte(chunk))
	}
	if got, want := lt.lines(), []string{"three", "four", "five"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
	long := &lineTail{max: 2}
	long.Write([]byte(strings.Repeat("x", 3000) + "\nshort\n"))
	if got := long.lines(); len(got) != 2 || len(got[0]) != maxLine || got[1] != "short" {
		t.Fatalf("long line: %d lines, first %d bytes", len(got), len(got[0]))
	}
}

func TestNixErrorMessage(t *testing.T) {
	e := &NixError{Args: []string{"nix", "build", "path:/x#y"}, ExitCode: 1, Tail: []string{"a> log", "error: builder failed"}}
	want := "`nix build path:/x#y` failed with exit status 1; its last lines:\n    a> log\n    error: builder failed"
	if e.Error() != want {
		t.Fatalf("got %q\nwant %q", e.Error(), want)
	}
	if got := quoteArgs([]string{"--option", "substituters", "", "nix-command flakes", "it's"}); !reflect.DeepEqual(got, []string{"--option", "substituters", "''", "'nix-command flakes'", `'it'\''s'`}) {
		t.Fatalf("quoteArgs: %q", got)
	}
}

func TestSystemFor(t *testing.T) {
	for goarch, want := range map[string]string{"amd64": "x86_64-linux", "arm64": "aarch64-linux"} {
		if got, err := SystemFor(goarch); err != nil || got != want {
			t.Errorf("SystemFor(%s) = %q, %v", goarch, got, err)
		}
	}
	if _, err := SystemFor("mips"); err == nil || !strings.Contains(err.Error(), "no agentbox images for GOARCH mips") {
		t.Errorf("SystemFor(mips): %v", err)
	}
}

func TestNewDefaults(t *testing.T) {
	r, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Flake() != "." || r.LockFile() != "agentbox.lock" || r.System() == "" {
		t.Fatalf("defaults: flake %q lock %q system %q", r.Flake(), r.LockFile(), r.System())
	}
	if _, err := New(Options{Flake: ".#images.python"}); err == nil || !strings.Contains(err.Error(), "without a #fragment") {
		t.Fatalf("flake with a fragment: %v", err)
	}
}

func TestDefaultLockFile(t *testing.T) {
	for flake, want := range map[string]string{
		".":                                    "agentbox.lock",
		"./sub":                                "sub/agentbox.lock",
		"../up":                                "../up/agentbox.lock",
		"/abs/dir":                             "/abs/dir/agentbox.lock",
		"/abs/dir/":                            "/abs/dir/agentbox.lock",
		"path:/abs/dir":                        "/abs/dir/agentbox.lock",
		"path:./rel":                           "rel/agentbox.lock",
		"git+file:///repo":                     "/repo/agentbox.lock",
		"git+file:///repo?dir=nix&ref=main":    "/repo/nix/agentbox.lock",
		"github:agentbox/agentbox":             "agentbox.lock",
		"nixpkgs":                              "agentbox.lock",
		"/nix/store/abc-source":                "agentbox.lock",
		"path:/nix/store/abc-source?narHash=x": "agentbox.lock",
	} {
		if got := DefaultLockFile(flake); got != want {
			t.Errorf("DefaultLockFile(%q) = %q, want %q", flake, got, want)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"python", "base", "my-profile", "_x", "py3'"} {
		if err := checkName(ok); err != nil {
			t.Errorf("checkName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a#b", "3d", "a b", "../x", "a?b"} {
		if err := checkName(bad); err == nil {
			t.Errorf("checkName(%q) accepted", bad)
		}
	}
}
