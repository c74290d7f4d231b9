package policy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/rpc"
	"os/exec"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
)

// Defaults of Options.
const (
	// DefaultTimeout bounds one decision (Options.Timeout).
	DefaultTimeout = 2 * time.Second
	// DefaultStartTimeout bounds a plugin's start and handshake.
	DefaultStartTimeout = 10 * time.Second
	// DefaultMaxBackoff is the longest wait between restarts.
	DefaultMaxBackoff = 5 * time.Second
)

// Options configure a Client.
type Options struct {
	// Timeout bounds each decision: a plugin that has not answered by
	// then is killed (restarted on the next call) and the call fails
	// with ErrUnavailable. 0 means DefaultTimeout.
	Timeout time.Duration
	// StartTimeout bounds the plugin's start and handshake; 0 means
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// MaxBackoff caps the wait between restarts after consecutive
	// failures (the first restart is at once, then 100 ms doubling);
	// 0 means DefaultMaxBackoff.
	MaxBackoff time.Duration
	// Logger receives the plugin's stderr and the client's restarts; nil
	// discards them.
	Logger *slog.Logger
}

// Client runs one policy plugin and asks it for decisions. It starts the
// plugin on first use (or Start), and again after it failed: a plugin
// that crashed, hung past the deadline or failed its handshake fails the
// call closed with ErrUnavailable, and the next call starts a new one
// (at once after one failure, then after a backoff, reset by an answer).
// Calls may run concurrently. Close ends the plugin.
type Client struct {
	argv []string
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	cur      *conn // nil: not running
	failures int   // consecutive failures
	retryAt  time.Time
	lastErr  error
	closed   bool
}

// conn is one running plugin process and its RPC connection.
type conn struct {
	pc  *plugin.Client
	rpc *rpcClient
}

// NewClient returns a client of the plugin started as argv (argv[0] is
// looked up in PATH); nothing starts until Start or the first Check.
func NewClient(argv []string, opts Options) (*Client, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("policy plugin: no command given")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{argv: argv, opts: opts, log: log}, nil
}

// Start starts the plugin now, so that a plugin that cannot start (not
// found, wrong handshake) is reported when the daemon starts. Errors
// wrap ErrUnavailable.
func (c *Client) Start() error {
	if _, err := c.connect(); err != nil {
		return ErrUnavailable.WithMessage(fmt.Sprintf("policy plugin %s: %v", c.argv[0], err))
	}
	return nil
}

// Close ends the plugin; later calls fail with ErrUnavailable.
func (c *Client) Close() error {
	c.mu.Lock()
	cur := c.cur
	c.cur, c.closed = nil, true
	c.mu.Unlock()
	if cur != nil {
		cur.pc.Kill()
	}
	return nil
}

// Check asks the plugin about req and returns its decision, validated
// against req.Hook. Errors: ErrUnavailable (the plugin could not decide:
// crashed, timed out, failed to start, answered an error or an invalid
// decision; the message says which), or ctx's error when the caller went
// away first. A Deny is a decision, not an error.
func (c *Client) Check(ctx context.Context, req Request) (Decision, error) {
	cur, err := c.connect()
	if err != nil {
		return Decision{}, c.unavailable(err)
	}
	var d Decision
	call := cur.rpc.check(req, &d)
	timer := time.NewTimer(c.opts.Timeout)
	defer timer.Stop()
	select {
	case <-call.Done:
	case <-timer.C:
		err := fmt.Errorf("the plugin did not answer within %s (its deadline; serve --policy-timeout)", c.opts.Timeout)
		c.fail(cur, err)
		return Decision{}, c.unavailable(err)
	case <-ctx.Done():
		return Decision{}, ctx.Err() // not the plugin's fault: it is left running
	}
	if err := call.Error; err != nil {
		var se rpc.ServerError
		if errors.As(err, &se) {
			// The plugin answered with an error: it runs, but cannot decide.
			c.succeeded(cur)
			return Decision{}, c.unavailable(fmt.Errorf("the plugin failed the call: %s", string(se)))
		}
		err = fmt.Errorf("the plugin went away during the call (%v): it is restarted on the next call", err)
		c.fail(cur, err)
		return Decision{}, c.unavailable(err)
	}
	c.succeeded(cur)
	if err := d.Validate(req.Hook); err != nil {
		return Decision{}, c.unavailable(fmt.Errorf("the plugin answered an invalid decision: %w", err))
	}
	return d, nil
}

// unavailable wraps why the plugin could not decide.
func (c *Client) unavailable(err error) error {
	return ErrUnavailable.WithMessage(fmt.Sprintf("policy plugin %s: %v; the call was refused (fail closed)", c.argv[0], err))
}

// connect returns the running plugin, starting one when none runs and
// the backoff allows; its errors say why there is none.
func (c *Client) connect() (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("the daemon is shutting down")
	}
	if c.cur != nil && !c.cur.pc.Exited() {
		return c.cur, nil
	}
	if c.cur != nil { // exited between calls
		c.failLocked(c.cur, errors.New("the plugin exited"))
	}
	if wait := time.Until(c.retryAt); wait > 0 {
		return nil, fmt.Errorf("restarting after %d failures (the last: %v); next attempt in %s", c.failures, c.lastErr, wait.Round(time.Millisecond))
	}
	cur, err := c.start()
	if err != nil {
		c.failLocked(nil, err)
		return nil, err
	}
	if c.failures > 0 {
		c.log.Info("policy plugin restarted", "plugin", c.argv[0], "after_failures", c.failures)
	}
	c.cur = cur
	return cur, nil
}

// start starts the plugin process and dispenses its policy.
func (c *Client) start() (*conn, error) {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	stderr := &tail{max: 2048}
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          plugin.PluginSet{pluginName: &rpcPlugin{}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolNetRPC},
		StartTimeout:     c.opts.StartTimeout,
		Logger:           c.hclog(),
		Stderr:           stderr,
	})
	rc, err := pc.Client()
	if err != nil {
		pc.Kill() // waits until the plugin's stderr is read
		// A plugin that exits before its handshake (a bad rule file)
		// says why on stderr; go-plugin's own text (an unrecognised
		// message, a guess at a wrong architecture) would hide it.
		msg := err.Error()
		exited := strings.HasPrefix(msg, "Unrecognized remote plugin message") || strings.HasPrefix(msg, "plugin exited before we could connect")
		if said := stderr.String(); exited && said != "" {
			return nil, fmt.Errorf("start: the plugin exited before its handshake, saying %q", said)
		}
		return nil, fmt.Errorf("start: %w", err)
	}
	raw, err := rc.Dispense(pluginName)
	if err != nil {
		pc.Kill()
		return nil, fmt.Errorf("dispense %q: %w", pluginName, err)
	}
	r, ok := raw.(*rpcClient)
	if !ok {
		pc.Kill()
		return nil, fmt.Errorf("dispense %q: got %T", pluginName, raw)
	}
	return &conn{pc: pc, rpc: r}, nil
}

// fail records a failure of cur (if it is still the current plugin) and
// kills it in the background.
func (c *Client) fail(cur *conn, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != cur {
		go cur.pc.Kill() // another call failed it already
		return
	}
	c.failLocked(cur, err)
}

func (c *Client) failLocked(cur *conn, err error) {
	if cur != nil {
		go cur.pc.Kill()
		if c.cur == cur {
			c.cur = nil
		}
	}
	c.failures++
	c.lastErr = err
	c.retryAt = time.Now().Add(c.backoff(c.failures))
	c.log.Warn("policy plugin failed; failing closed", "plugin", c.argv[0], "failures", c.failures, "err", err)
}

// backoff is the wait before the next start after n consecutive
// failures: none after the first, then 100 ms doubling up to MaxBackoff.
func (c *Client) backoff(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	d := 100 * time.Millisecond
	for i := 2; i < n && d < c.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.opts.MaxBackoff)
}

// succeeded resets the failure count after an answer of cur.
func (c *Client) succeeded(cur *conn) {
	c.mu.Lock()
	if c.cur == cur {
		c.failures, c.retryAt, c.lastErr = 0, time.Time{}, nil
	}
	c.mu.Unlock()
}

// hclog returns go-plugin's logger: the plugin's stderr and go-plugin's
// own messages as lines of the client's slog logger.
func (c *Client) hclog() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "policy-plugin",
		Output:     &lineWriter{log: c.log},
		Level:      hclog.Info,
		JSONFormat: false,
	})
}

// lineWriter logs each line written to it.
type lineWriter struct {
	mu  sync.Mutex
	log *slog.Logger
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(w.buf[:i])); line != "" {
			w.log.Info(line, "component", "policy-plugin")
		}
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

var _ io.Writer = (*lineWriter)(nil)

// ParseCommand splits the --policy command line into words as a POSIX
// shell would, without expansions: blanks separate words, single quotes
// keep everything literally, double quotes keep everything but `\"` and
// `\\`, a backslash outside quotes escapes the next character.
func ParseCommand(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	r := bufio.NewReader(strings.NewReader(s))
	for {
		ch, _, err := r.ReadRune()
		if err == io.EOF {
			break
		}
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case ch == '\'':
			inWord = true
			for {
				ch, _, err := r.ReadRune()
				if err != nil {
					return nil, fmt.Errorf("unterminated single quote in %q", s)
				}
				if ch == '\'' {
					break
				}
				cur.WriteRune(ch)
			}
		case ch == '"':
			inWord = true
			for {
				ch, _, err := r.ReadRune()
				if err != nil {
					return nil, fmt.Errorf("unterminated double quote in %q", s)
				}
				if ch == '"' {
					break
				}
				if ch == '\\' {
					next, _, err := r.ReadRune()
					if err != nil {
						return nil, fmt.Errorf("unterminated double quote in %q", s)
					}
					if next != '"' && next != '\\' {
						cur.WriteRune('\\')
					}
					ch = next
				}
				cur.WriteRune(ch)
			}
		case ch == '\\':
			inWord = true
			next, _, err := r.ReadRune()
			if err != nil {
				return nil, fmt.Errorf("trailing backslash in %q", s)
			}
			cur.WriteRune(next)
		default:
			inWord = true
			cur.WriteRune(ch)
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, errors.New("empty command")
	}
	return words, nil
}

// tail keeps the last max bytes written to it (a plugin's stderr),
// trimmed of surrounding space when read. Safe for concurrent use.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
