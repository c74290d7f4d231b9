package profile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// nixFeatures enables the flake commands on every nix invocation, so a Nix
// whose nix.conf does not enable them (Debian's nix-bin 2.8, a fresh
// install) works unchanged.
var nixFeatures = []string{"--extra-experimental-features", "nix-command flakes"}

// tailLines is how many of nix's last stderr lines an error quotes.
const tailLines = 20

// maxLine caps one quoted line (bytes), so a runaway log line cannot blow up
// an error message.
const maxLine = 1000

// stopGrace is how long a cancelled nix gets after SIGTERM to clean up
// (release its store locks, kill its builders) before it is killed.
const stopGrace = 10 * time.Second

// NixError is a nix command that ran and failed: its command line, exit
// status and the last lines it wrote on stderr (its own messages and, with
// -L, the build log).
type NixError struct {
	// Args is the command line, "nix" first.
	Args []string
	// ExitCode is nix's exit status (-1 when it was killed by a signal).
	ExitCode int
	// Tail holds up to 20 last lines of nix's stderr, oldest first.
	Tail []string
}

// Error implements error: the command, its exit status and the log tail,
// one indented line each.
func (e *NixError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "`%s` failed with exit status %d", strings.Join(e.Args, " "), e.ExitCode)
	if len(e.Tail) > 0 {
		b.WriteString("; its last lines:")
		for _, l := range e.Tail {
			b.WriteString("\n    ")
			b.WriteString(l)
		}
	}
	return b.String()
}

// mentions reports whether one of nix's last lines contains s.
func (e *NixError) mentions(s string) bool {
	for _, l := range e.Tail {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// runNix runs `nix FEATURES SUB EXTRA... ARGS...` (EXTRA: the resolver's
// NixArgs) and returns its stdout. nix's stderr goes to progress (nil:
// nowhere) and its last lines into the *NixError of a failure. A missing
// nix binary is ErrNixNotFound; a cancelled ctx stops nix with SIGTERM
// (SIGKILL 10 s later) and returns ctx's error.
func (r *Resolver) runNix(ctx context.Context, progress io.Writer, sub string, args ...string) ([]byte, error) {
	bin, err := exec.LookPath("nix")
	if err != nil {
		return nil, fmt.Errorf("%w: install Nix (https://nixos.org/download) or pass --image DIR", ErrNixNotFound)
	}
	argv := append(append([]string{sub}, r.nixArgs...), args...)
	full := append(append([]string{}, nixFeatures...), argv...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = stopGrace
	var stdout bytes.Buffer
	tail := &lineTail{max: tailLines}
	cmd.Stdout = &stdout
	if progress != nil {
		cmd.Stderr = io.MultiWriter(tail, progress)
	} else {
		cmd.Stderr = tail
	}
	err = cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("nix %s: %w", sub, ctx.Err())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil, &NixError{Args: append([]string{"nix"}, quoteArgs(full)...), ExitCode: ee.ExitCode(), Tail: tail.lines()}
	}
	if err != nil {
		return nil, fmt.Errorf("nix %s: %w", sub, err)
	}
	return stdout.Bytes(), nil
}

// quoteArgs quotes the arguments that a shell would split or expand, so a
// quoted command line can be pasted to reproduce a failure.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`;&|<>()*?[]{}~!") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}

// lineTail is an io.Writer that keeps the last max lines written to it
// (each cut to maxLine bytes). It is written by one goroutine (exec's
// stderr copier) and read after the command ended.
type lineTail struct {
	max     int
	done    []string
	partial []byte
}

// Write implements io.Writer; it never fails.
func (t *lineTail) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			t.add(p)
			break
		}
		t.add(p[:i])
		t.finish()
		p = p[i+1:]
	}
	return n, nil
}

func (t *lineTail) add(p []byte) {
	if room := maxLine - len(t.partial); room > 0 {
		t.partial = append(t.partial, p[:min(len(p), room)]...)
	}
}

func (t *lineTail) finish() {
	if len(t.partial) == 0 {
		return // a blank line or the \n of a \r\n
	}
	t.done = append(t.done, string(t.partial))
	t.partial = t.partial[:0]
	if len(t.done) > t.max {
		t.done = t.done[len(t.done)-t.max:]
	}
}

// lines returns the kept lines, oldest first, including an unterminated
// last one.
func (t *lineTail) lines() []string {
	t.finish()
	return append([]string(nil), t.done...)
}
