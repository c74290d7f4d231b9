package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
)

// commandFlags are the flags that shape the guest command, shared by `run`
// and `exec`.
func commandFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "timeout", Usage: "kill the command (and its process group) after `DURATION` (e.g. 30s, 5m); exit 124", DefaultText: "none"},
		&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "set `K=V` in the command's environment (repeatable; use one spelling, --env or -e)"},
		&cli.StringFlag{Name: "workdir", Aliases: []string{"w"}, Usage: "working `DIR` of the command in the guest (must exist; else exit 126)"},
		&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "run as `USER` in the guest: a name (looked up in the guest; HOME, USER set, cwd its home) or UID[:GID] (default: the image's default user, root in the test image)"},
		&cli.BoolFlag{Name: "shell", Usage: "run the arguments joined by spaces with /bin/sh -c (pass the script as one argument to keep its quoting)"},
		&cli.BoolFlag{Name: "interactive", Aliases: []string{"i"}, Usage: "forward stdin even when it is a terminal"},
		&cli.BoolFlag{Name: "tty", Aliases: []string{"t"}, Usage: "run the command on a terminal the size of ours (needs one on stdin); with -i ours goes raw and every key goes to it"},
	}
}

// usageError turns a flag parse error into a short message with a hint,
// instead of urfave/cli's full help text.
func usageError(c *cli.Context, err error, _ bool) error {
	msg := err.Error()
	// Go's flag package says `invalid value "5" for flag -timeout: parse
	// error`: name the flag as it is typed and say what its type takes.
	if m := flagValueError.FindStringSubmatch(msg); m != nil {
		name := m[1]
		if len(name) > 1 {
			msg = strings.Replace(msg, "flag -"+name, "flag --"+name, 1)
		}
		switch flagKind(c, name) {
		case "duration":
			msg += " (durations take a unit: 500ms, 30s, 5m)"
		case "number":
			msg += " (want a whole number)"
		}
	}
	name := "agentbox"
	if c.Command != nil && c.Command.Name != "" && c.Command.Name != c.App.Name {
		name += " " + c.Command.Name
	}
	return fmt.Errorf("%s: see `%s --help`", msg, name)
}

// flagValueError matches the flag package's error for a value its flag
// cannot parse; the group is the flag's name.
var flagValueError = regexp.MustCompile(`invalid value ".*" for flag -([A-Za-z0-9-]+):`)

// flagKind says what the flag named name of c's command (or the app's
// global flags) takes: "duration", "number", or "" for anything else.
func flagKind(c *cli.Context, name string) string {
	flags := c.App.Flags
	if c.Command != nil {
		flags = append(slices.Clone(c.Command.Flags), flags...)
	}
	for _, f := range flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		switch f.(type) {
		case *cli.DurationFlag:
			return "duration"
		case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
			return "number"
		}
		return ""
	}
	return ""
}

// guestArgv returns the command to run from the arguments after "--".
func guestArgv(c *cli.Context, usage string) ([]string, error) {
	return guestArgvFrom(c, c.Args().Slice(), usage)
}

// guestArgvFrom returns the command to run from argv, applying --shell.
func guestArgvFrom(c *cli.Context, argv []string, usage string) ([]string, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("no command given: use `%s`", usage)
	}
	if c.Bool("shell") {
		argv = []string{"/bin/sh", "-c", strings.Join(argv, " ")}
	}
	return argv, nil
}

// userName is what --user takes as a guest account name (api.UserPattern).
var userName = regexp.MustCompile(api.UserPattern)

// execRequest builds the guest exec request from the command flags.
func execRequest(c *cli.Context, argv []string) (agentproto.ExecRequest, error) {
	req := agentproto.ExecRequest{
		Argv: argv,
		Dir:  c.String("workdir"),
	}
	if t := c.Duration("timeout"); t > 0 {
		req.TimeoutMs = t.Milliseconds()
	} else if t < 0 {
		return req, fmt.Errorf("--timeout %s: must be positive", t)
	}
	for _, kv := range c.StringSlice("env") {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return req, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		req.Env = append(req.Env, kv)
	}
	if u := c.String("user"); u != "" {
		uidStr, gidStr, hasGID := strings.Cut(u, ":")
		uid, err := strconv.ParseUint(uidStr, 10, 32)
		if err != nil && !hasGID && userName.MatchString(u) {
			req.User = u // resolved by the guest agent
			return req, nil
		}
		if err != nil {
			return req, fmt.Errorf("--user %q: want a user name or a numeric UID[:GID]", u)
		}
		uid32 := uint32(uid)
		req.UID = &uid32
		gid32 := uid32
		if hasGID {
			gid, err := strconv.ParseUint(gidStr, 10, 32)
			if err != nil {
				return req, fmt.Errorf("--user %q: want a numeric UID[:GID]", u)
			}
			gid32 = uint32(gid)
		}
		req.GID = &gid32
	}
	return req, nil
}

// interrupts cancels the returned context on SIGINT or SIGTERM and reports
// which signal it was (0 for none). stop releases the signal handler.
func interrupts(parent context.Context) (ctx context.Context, got func() syscall.Signal, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var sig atomic.Int32
	go func() {
		if s, ok := <-sigs; ok {
			sig.Store(int32(s.(syscall.Signal)))
			cancel()
		}
	}()
	return ctx, func() syscall.Signal { return syscall.Signal(sig.Load()) }, func() {
		signal.Stop(sigs)
		close(sigs)
		cancel()
	}
}

// execer runs one command in a guest: the *agent.Client of `exec
// --agent-socket`.
type execer interface {
	Exec(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (agentproto.ExitStatus, error)
}

// runGuest runs req through g with this process's stdio, and maps the
// outcome to the CLI's exit status (an *exitError, or an error for 125).
// Stdin is forwarded unless it is a terminal (then only with -i). The guest
// agent enforces the timeout; as a backstop against a hung guest the host
// gives up 5 s after it and reports a timeout too.
func runGuest(ctx context.Context, c *cli.Context, g execer, req agentproto.ExecRequest, got func() syscall.Signal) error {
	stdin := forwardedStdin(c)
	req.Stdin = stdin != nil
	timeout := c.Duration("timeout")
	execCtx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		execCtx, cancel = context.WithTimeout(ctx, timeout+5*time.Second)
		defer cancel()
	}
	st, err := g.Exec(execCtx, req, stdin, c.App.Writer, c.App.ErrWriter)
	if sig := got(); sig != 0 {
		return signalExit(sig, fmt.Sprintf("%s: guest command killed", sig))
	}
	if err != nil && timeout > 0 && errors.Is(execCtx.Err(), context.DeadlineExceeded) {
		st, err = agentproto.ExitStatus{TimedOut: true}, nil
	}
	var startErr *agentproto.ExecError
	if err != nil && !errors.As(err, &startErr) {
		return fmt.Errorf("exec: %w", err)
	}
	return exitFor(statusCode(st, timeout))
}

// forwardedStdin returns the stdin to give the guest command, or nil for
// none: ours is forwarded unless it is a terminal (then only with -i) or
// /dev/null (nothing to forward; the command gets its own /dev/null).
func forwardedStdin(c *cli.Context) io.Reader {
	r := c.App.Reader
	f, ok := r.(*os.File)
	if !ok {
		return r
	}
	if isTerminal(f) && !c.Bool("interactive") {
		return nil
	}
	if isDevNull(f) {
		return nil
	}
	return f
}

// isDevNull reports whether f is /dev/null.
func isDevNull(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err == nil && os.SameFile(fi, null)
}

// apiExecRequest is req as the daemon's API takes it. Stdin is not part of
// it: callers stream it over the interactive exec.
func apiExecRequest(req agentproto.ExecRequest) api.ExecRequest {
	return api.ExecRequest{
		Cmd:       req.Argv,
		Env:       req.Env,
		Cwd:       req.Dir,
		UID:       req.UID,
		GID:       req.GID,
		User:      req.User,
		TimeoutMs: req.TimeoutMs,
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
