package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentbox/agentbox/vmctl/audit"
)

// defaultReplayOutputLines is how many lines of each output stream
// writeReplay shows under a command when replayOptions.MaxOutputLines is 0.
const defaultReplayOutputLines = 4

// Layout limits of writeReplay, in characters.
const (
	replayDescColumn = 48  // the result column starts here after the description (unless it is longer)
	replayDescMax    = 120 // longer descriptions are cut with "…"
	replayLineMax    = 100 // longer output lines are cut with "…"
)

// replayOptions tunes writeReplay.
type replayOptions struct {
	// Name is the sandbox's name for the header; "" takes the "name"
	// argument of a create entry, if any.
	Name string
	// Color adds ANSI colours (for a terminal); off by default.
	Color bool
	// MaxOutputLines is how many lines of each output head are shown
	// under a command: 0 means defaultReplayOutputLines, < 0 none.
	MaxOutputLines int
}

// writeReplay renders entries (normally one sandbox's, as audit.Log.Read
// returns them) as a timeline for people, `agentbox audit --replay`:
//
//	sandbox 3f2a9c1b0d4e (work1) — 5 actions, 2026-11-29 14:02:11 → 14:09:40 UTC
//	14:02:11.120  +0.000s  uid:0   create       image=debian-minimal name=work1 vcpus=1 memory=256MiB          2.1s
//	14:02:14.002  +2.882s  uid:0   exec         $ python3 -c 'print(1)'                           exit 0  41ms
//	                                            │ 1
//	14:02:15.300  +4.180s  uid:0   file.upload  /work/data.csv (50.0 MiB) mode=0644                       1.9s
//	14:03:00.020  +48.9s   uid:0   exec         /work $ sh -c 'echo oops >&2; exit 3'             exit 3  30ms
//	                                            ! oops
//	14:09:40.120  +7m29s   daemon  reap         ttl reached
//
// Entries are sorted by Time (stable; the log holds them in the order the
// actions ended). Columns: UTC time of day, offset from the first entry,
// caller (and the sandbox when entries of several are given), action,
// what was done (argv shell-quoted, paths with sizes, other arguments as
// key=value, see audit's Arg* keys), the result ("exit N" or "error CODE")
// and the duration. Under a command come the first lines of its output
// heads, "│" for stdout and "!" for stderr, with "…" when more was
// produced; under a failed action its error message after "✗". Control
// characters from the guest are shown escaped, never sent to the
// terminal. A line "── DATE ──" marks each change of day.
//
// Errors are w's.
func writeReplay(w io.Writer, entries []audit.Entry, opts replayOptions) error {
	bw := bufio.NewWriter(w)
	if len(entries) == 0 {
		bw.WriteString("no audit entries\n")
		return bw.Flush()
	}
	es := slices.Clone(entries)
	slices.SortStableFunc(es, func(a, b audit.Entry) int { return a.Time.Compare(b.Time) })
	maxLines := opts.MaxOutputLines
	if maxLines == 0 {
		maxLines = defaultReplayOutputLines
	}
	p := palette{on: opts.Color}

	sandboxes := map[string]bool{} // IDs; "" stands for daemon-wide entries
	name := opts.Name
	for _, e := range es {
		sandboxes[e.Sandbox] = true
		if name == "" && e.Action == audit.ActionCreate {
			if n, ok := e.Args[audit.ArgName].(string); ok {
				name = n
			}
		}
	}
	multi := len(sandboxes) > 1

	t0 := es[0].Time.UTC()
	rows := make([]replayRow, len(es))
	var w1 widths
	for i, e := range es {
		r := newReplayRow(e, t0, maxLines)
		rows[i] = r
		w1.rel = max(w1.rel, textWidth(r.rel))
		w1.caller = max(w1.caller, textWidth(r.caller))
		w1.action = max(w1.action, textWidth(r.action))
		w1.sandbox = max(w1.sandbox, textWidth(r.sandbox))
		if r.result != "" || r.dur != "" {
			w1.desc = max(w1.desc, min(textWidth(r.desc), replayDescColumn))
		}
		if r.dur != "" {
			w1.result = max(w1.result, textWidth(r.result))
		}
		w1.dur = max(w1.dur, textWidth(r.dur))
	}

	// Header.
	last := es[len(es)-1].Time.UTC()
	var head strings.Builder
	daemon := sandboxes[""]
	switch n := len(sandboxes) - boolInt(daemon); {
	case n == 0:
		head.WriteString("daemon")
	case n == 1:
		for id := range sandboxes {
			if id != "" {
				head.WriteString("sandbox " + sanitize(id))
			}
		}
		if name != "" {
			head.WriteString(" (" + sanitize(name) + ")")
		}
	default:
		fmt.Fprintf(&head, "%d sandboxes", n)
	}
	if daemon && multi {
		head.WriteString(" and the daemon")
	}
	fmt.Fprintf(&head, " — %d action%s, %s", len(es), plural(len(es)), t0.Format(time.DateTime))
	switch {
	case last.Equal(t0):
	case sameDay(t0, last):
		head.WriteString(" → " + last.Format(time.TimeOnly))
	default:
		head.WriteString(" → " + last.Format(time.DateTime))
	}
	head.WriteString(" UTC")
	bw.WriteString(p.bold(head.String()) + "\n")

	indent := strings.Repeat(" ", 12+2+w1.rel+2+w1.caller+2+w1.action+2)
	if multi {
		indent += strings.Repeat(" ", w1.sandbox+2)
	}
	day := t0
	for i, r := range rows {
		t := es[i].Time.UTC()
		if !sameDay(day, t) {
			bw.WriteString(p.dim("── "+t.Format(time.DateOnly)+" ──") + "\n")
			day = t
		}
		var line strings.Builder
		line.WriteString(p.dim(t.Format("15:04:05.000")) + "  ")
		line.WriteString(pad(p.dim(r.rel), r.rel, w1.rel) + "  ")
		if multi {
			line.WriteString(pad(r.sandbox, r.sandbox, w1.sandbox) + "  ")
		}
		line.WriteString(pad(r.caller, r.caller, w1.caller) + "  ")
		line.WriteString(pad(p.bold(r.action), r.action, w1.action) + "  ")
		line.WriteString(pad(r.desc, r.desc, w1.desc) + "  ")
		if r.result != "" || r.dur != "" {
			result := r.result
			switch r.outcome {
			case outcomeOK:
				result = p.green(result)
			case outcomeFailed:
				result = p.red(result)
			}
			line.WriteString(pad(result, r.result, w1.result) + "  ")
			line.WriteString(strings.Repeat(" ", w1.dur-textWidth(r.dur)) + p.dim(r.dur))
		}
		bw.WriteString(strings.TrimRight(line.String(), " ") + "\n")
		for _, s := range r.sub {
			var text string
			switch s.kind {
			case subStdout:
				text = "│ " + s.text
			case subStderr:
				text = p.yellow("! " + s.text)
			case subMore:
				text = p.dim(s.text)
			case subError:
				text = p.red("✗ " + s.text)
			}
			bw.WriteString(indent + text + "\n")
		}
	}
	return bw.Flush()
}

type widths struct{ rel, sandbox, caller, action, desc, result, dur int }

type outcome int

const (
	outcomeNone outcome = iota
	outcomeOK
	outcomeFailed
)

type subKind int

const (
	subStdout subKind = iota
	subStderr
	subMore
	subError
)

type subLine struct {
	kind subKind
	text string
}

// replayRow is one entry's cells, plain text (colour is added when
// written, after widths are measured).
type replayRow struct {
	rel, sandbox, caller, action, desc, result, dur string
	outcome                                         outcome
	sub                                             []subLine
}

func newReplayRow(e audit.Entry, t0 time.Time, maxLines int) replayRow {
	r := replayRow{
		rel:     "+" + formatOffset(e.Time.Sub(t0)),
		sandbox: sanitize(e.Sandbox),
		caller:  sanitize(e.Caller),
		action:  sanitize(e.Action),
		desc:    cut(describe(e), replayDescMax),
	}
	if r.sandbox == "" {
		r.sandbox = "-"
	}
	if r.caller == "" {
		r.caller = "?"
	}
	switch {
	case e.Error != "":
		r.result, r.outcome = "error "+sanitize(e.Error), outcomeFailed
	case e.ExitCode != nil:
		r.result = "exit " + strconv.Itoa(*e.ExitCode)
		r.outcome = outcomeOK
		if *e.ExitCode != 0 {
			r.outcome = outcomeFailed
		}
	}
	if e.DurationMs > 0 || r.result != "" {
		r.dur = formatDuration(time.Duration(e.DurationMs) * time.Millisecond)
	}
	switch {
	case maxLines > 0 && e.Tty != nil:
		r.sub = append(r.sub, ttySubLines(e, maxLines)...) // replaytty.go
	case maxLines > 0:
		r.sub = append(r.sub, outputLines(e.Stdout, subStdout, maxLines)...)
		r.sub = append(r.sub, outputLines(e.Stderr, subStderr, maxLines)...)
	}
	if e.ErrorMessage != "" {
		r.sub = append(r.sub, subLine{subError, cut(sanitize(e.ErrorMessage), replayDescMax)})
	}
	return r
}

// describe says what an entry did, in one line.
func describe(e audit.Entry) string {
	args := maps.Clone(e.Args)
	if args == nil {
		args = map[string]any{}
	}
	take := func(k string) (any, bool) {
		v, ok := args[k]
		delete(args, k)
		return v, ok
	}
	var parts []string
	add := func(s string) {
		if s != "" {
			parts = append(parts, s)
		}
	}
	switch e.Action {
	case audit.ActionProcessStart, audit.ActionProcessStdin, audit.ActionProcessKill, audit.ActionProcessExit, audit.ActionProcessAttach:
		add(sanitize(e.ExecID))
	}
	switch e.Action {
	case audit.ActionExec, audit.ActionProcessStart:
		cmd, _ := take(audit.ArgCmd)
		cwd, _ := take(audit.ArgCwd)
		prompt := "$"
		if s := valueString(cwd); s != "" && s != "/" {
			prompt = quoteWord(s) + " $"
		}
		add(prompt + " " + quoteArgv(cmd))
		delete(args, audit.ArgEnvKeys) // keys only; the command line says enough
		delete(args, audit.ArgDetached)
	case audit.ActionProcessStdin:
		n := formatBytes(e.BytesIn)
		if c, _ := take(audit.ArgClose); c == true {
			n += ", then closed"
		}
		add("stdin " + n)
	case audit.ActionProcessKill:
		if s, ok := take(audit.ArgSignal); ok {
			add("signal " + quoteWord(valueString(s)))
		}
	case audit.ActionUpload, audit.ActionDownload, audit.ActionStat, audit.ActionList, audit.ActionMkdir, audit.ActionDelete, audit.ActionWatch:
		if path, ok := take(audit.ArgPath); ok {
			add(quoteWord(valueString(path)))
		}
		switch {
		case e.Error != "": // nothing moved
		case e.Action == audit.ActionUpload:
			add("(" + formatBytes(e.BytesIn) + ")")
		case e.Action == audit.ActionDownload:
			add("(" + formatBytes(e.BytesOut) + ")")
		}
	case audit.ActionReap, audit.ActionReconcile, audit.ActionStateChange:
		if reason, ok := take(audit.ArgReason); ok {
			add(sanitize(valueString(reason)))
		}
	}
	// The rest as key=value: well-known keys first, then by name.
	first := []string{audit.ArgImage, audit.ArgName, audit.ArgVCPUs, audit.ArgMemoryMiB}
	keys := slices.Sorted(maps.Keys(args))
	slices.SortStableFunc(keys, func(a, b string) int {
		ia, ib := slices.Index(first, a), slices.Index(first, b)
		if ia < 0 {
			ia = len(first)
		}
		if ib < 0 {
			ib = len(first)
		}
		return ia - ib
	})
	var rest []string
	for _, k := range keys {
		if v := args[k]; v != nil && v != "" {
			rest = append(rest, formatArg(k, v))
		}
	}
	switch {
	case len(rest) == 0:
	case e.Action == audit.ActionExec || e.Action == audit.ActionProcessStart:
		// Bracketed, so that settings (uid, timeout) do not read as more
		// words of the command line.
		add("[" + strings.Join(rest, " ") + "]")
	default:
		parts = append(parts, rest...)
	}
	return strings.Join(parts, " ")
}

// formatArg renders one argument as key=value, by the key's unit suffix.
func formatArg(k string, v any) string {
	if n, ok := number(v); ok {
		switch {
		case strings.HasSuffix(k, "_ms"):
			return sanitize(strings.TrimSuffix(k, "_ms")) + "=" + formatSetting(time.Duration(n*float64(time.Millisecond)))
		case strings.HasSuffix(k, "_mib"):
			return sanitize(strings.TrimSuffix(k, "_mib")) + "=" + strconv.FormatFloat(n, 'f', -1, 64) + "MiB"
		case strings.HasSuffix(k, "_bytes"):
			return sanitize(strings.TrimSuffix(k, "_bytes")) + "=" + formatBytes(int64(n))
		}
	}
	return sanitize(k) + "=" + formatValue(v)
}

// formatValue renders an argument value: strings shell-quoted when
// needed, lists comma-separated, maps as {k=v,…}.
func formatValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return quoteWord(v)
	case bool:
		return strconv.FormatBool(v)
	case []string:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = quoteWord(s)
		}
		return strings.Join(q, ",")
	case []any:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = formatValue(s)
		}
		return strings.Join(q, ",")
	case map[string]string:
		var q []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			q = append(q, quoteWord(k)+"="+quoteWord(v[k]))
		}
		return "{" + strings.Join(q, ",") + "}"
	case map[string]any:
		var q []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			q = append(q, quoteWord(k)+"="+formatValue(v[k]))
		}
		return "{" + strings.Join(q, ",") + "}"
	}
	if n, ok := number(v); ok {
		return strconv.FormatFloat(n, 'f', -1, 64)
	}
	return sanitize(fmt.Sprint(v))
}

// number returns v as a float64 if it is any Go or JSON number.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, !math.IsNaN(n) && !math.IsInf(n, 0)
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// valueString returns a string argument, or the rendering of another.
func valueString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if v == nil {
		return ""
	}
	return formatValue(v)
}

// quoteArgv renders an argv ([]string or JSON's []any) shell-quoted.
func quoteArgv(v any) string {
	var words []string
	switch v := v.(type) {
	case []string:
		words = v
	case []any:
		for _, w := range v {
			words = append(words, valueString(w))
		}
	case nil:
		return "?"
	default:
		return formatValue(v)
	}
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = quoteWord(w)
	}
	return strings.Join(q, " ")
}

// sanitize makes text from callers and guests safe to print on a
// terminal: tabs become spaces, other control and non-printable
// characters (ESC, CR, C1 controls, bidi overrides) become \xNN or \uNNNN.
func sanitize(s string) string {
	clean := utf8.ValidString(s)
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	col := 0
	for _, r := range s {
		switch {
		case r == '\t':
			n := 8 - col%8
			b.WriteString(strings.Repeat(" ", n))
			col += n
			continue
		case r == utf8.RuneError || unicode.IsPrint(r) || r == ' ':
			b.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		col++
	}
	return b.String()
}

// outputLines returns up to maxLines lines of an output head, then a "…"
// line when more was produced.
func outputLines(d *audit.OutputDigest, kind subKind, maxLines int) []subLine {
	if d == nil || d.Bytes == 0 {
		return nil
	}
	head := d.Head
	partial := d.Truncated
	head = strings.TrimSuffix(head, "\n")
	var lines []string
	if head != "" {
		lines = strings.Split(head, "\n")
	}
	var out []subLine
	for i, l := range lines {
		if i == maxLines {
			more := len(lines) - maxLines
			text := fmt.Sprintf("  … %d more line%s", more, plural(more))
			if partial {
				text = "  … " + formatBytes(d.Bytes) + " in all"
			}
			return append(out, subLine{subMore, text})
		}
		out = append(out, subLine{kind, cut(sanitize(strings.TrimSuffix(l, "\r")), replayLineMax)})
	}
	if partial {
		out = append(out, subLine{subMore, "  … " + formatBytes(d.Bytes) + " in all"})
	}
	return out
}

// cut shortens s to at most n characters, ending it with "…" if cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// formatOffset renders the time since the first entry: "0.000s",
// "48.9s", "7m29s", "2h05m", "3d04h".
func formatOffset(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.3fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", math.Floor(d.Seconds()*10)/10)
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// formatDuration renders an action's duration: "41ms", "2.1s", "1m05s",
// "2h05m".
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", math.Floor(d.Seconds()*10)/10)
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// formatSetting renders a configured duration, round ones without their
// zeros: "30s", "1m", "1h", "1.5s", "1h30m".
func formatSetting(d time.Duration) string {
	s := formatDuration(d)
	switch {
	case strings.HasSuffix(s, ".0s"):
		return strings.TrimSuffix(s, ".0s") + "s"
	case strings.HasSuffix(s, "m00s"):
		return strings.TrimSuffix(s, "00s")
	case strings.HasSuffix(s, "h00m"):
		return strings.TrimSuffix(s, "00m")
	}
	return s
}

// formatBytes renders a byte count: "512 B", "1.5 KiB", "50.0 MiB".
func formatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, unit := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= 1024
		if f < 1024 || unit == "TiB" {
			return fmt.Sprintf("%.1f %s", f, unit)
		}
	}
	panic("unreachable")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func sameDay(a, b time.Time) bool {
	return a.Year() == b.Year() && a.YearDay() == b.YearDay()
}

func textWidth(s string) int { return utf8.RuneCountInString(s) }

// pad returns shown (plain possibly wrapped in colour codes) followed by
// the spaces that make plain width wide.
func pad(shown, plain string, width int) string {
	return shown + strings.Repeat(" ", max(0, width-textWidth(plain)))
}

// palette adds ANSI SGR colours when on.
type palette struct{ on bool }

func (p palette) wrap(code, s string) string {
	if !p.on || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func (p palette) bold(s string) string   { return p.wrap("1", s) }
func (p palette) dim(s string) string    { return p.wrap("2", s) }
func (p palette) red(s string) string    { return p.wrap("31", s) }
func (p palette) green(s string) string  { return p.wrap("32", s) }
func (p palette) yellow(s string) string { return p.wrap("33", s) }
