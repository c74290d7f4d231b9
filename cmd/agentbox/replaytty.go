package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/vmctl/audit"
)

// ttyReplayLines is how many lines of a terminal session's transcript
// writeReplay shows under its command.
const ttyReplayLines = 12

// ttyMaxIdle caps a pause of `audit --play`, as asciinema's idle limit
// does: a session left idle for minutes plays on after this.
const ttyMaxIdle = 2 * time.Second

// ttySubLines renders a terminal session under its command in the
// timeline: the screen's text (escape sequences dropped) as "│" lines,
// at most ttyReplayLines, then what was typed and how to play it.
func ttySubLines(e audit.Entry, maxLines int) []subLine {
	s := e.Tty
	var out, in []byte
	for _, c := range s.Chunks {
		switch c.Dir {
		case audit.TtyOutput:
			out = append(out, c.Data...)
		case audit.TtyInput:
			in = append(in, c.Data...)
		}
	}
	lines := terminalText(out)
	n := max(maxLines, ttyReplayLines)
	var sub []subLine
	for i, l := range lines {
		if i == n {
			more := len(lines) - n
			sub = append(sub, subLine{subMore, fmt.Sprintf("  … %d more line%s", more, plural(more))})
			break
		}
		sub = append(sub, subLine{subStdout, cut(sanitize(l), replayLineMax)})
	}
	if len(in) > 0 {
		typed := "  typed: " + sanitize(string(in))
		if s.InputTruncated {
			typed += " …"
		}
		sub = append(sub, subLine{subMore, cut(typed, replayDescMax)})
	}
	note := fmt.Sprintf("  terminal %dx%d; play it: agentbox audit --play %s %s", s.Rows, s.Cols, e.ExecID, e.Sandbox)
	if s.OutputTruncated {
		note += " (output cut at the recording limit)"
	}
	return append(sub, subLine{subMore, note})
}

// terminalText turns what a command wrote to a terminal into lines of
// text: CSI, OSC and other escape sequences are dropped, "\r\n" ends a
// line, a lone "\r" starts the line over and a backspace takes back a
// character. Trailing empty lines are dropped.
func terminalText(b []byte) []string {
	var lines []string
	var line []rune
	s := string(b)
	for i := 0; i < len(s); {
		r := rune(s[i])
		switch {
		case r == 0x1b: // ESC
			i = skipEscape(s, i)
			continue
		case r == '\n':
			lines = append(lines, string(line))
			line = line[:0]
		case r == '\r':
			if i+1 < len(s) && s[i+1] == '\n' {
				break
			}
			line = line[:0]
		case r == '\b':
			if len(line) > 0 {
				line = line[:len(line)-1]
			}
		case r == '\a' || r < 0x20 && r != '\t':
		default:
			var size int
			r, size = utf8.DecodeRuneInString(s[i:])
			line = append(line, r)
			i += size
			continue
		}
		i++
	}
	if len(line) > 0 {
		lines = append(lines, string(line))
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// skipEscape returns the index after the escape sequence at s[i].
func skipEscape(s string, i int) int {
	i++
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '[': // CSI: parameters, then a final byte 0x40-0x7e
		for i++; i < len(s); i++ {
			if s[i] >= 0x40 && s[i] <= 0x7e {
				return i + 1
			}
		}
		return i
	case ']', 'P', '_', '^': // OSC, DCS, APC, PM: until BEL or ESC \
		for i++; i < len(s); i++ {
			if s[i] == '\a' {
				return i + 1
			}
			if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
		}
		return i
	case '(', ')', '*', '+', '#', '%': // charset and similar: one more byte
		return min(i+2, len(s))
	}
	return i + 1
}

// playTty writes a recorded session's output to w with its timing (pauses
// divided by speed, each at most ttyMaxIdle; speed 0 plays it at once),
// as `agentbox audit --play` does: the bytes go to the terminal as the
// command wrote them, escape sequences included.
func playTty(ctx context.Context, w io.Writer, s *audit.TtySession, speed float64) error {
	var last int64
	for _, c := range s.Chunks {
		if c.Dir != audit.TtyOutput {
			continue
		}
		if speed > 0 && c.Ms > last {
			d := min(time.Duration(float64(time.Duration(c.Ms-last)*time.Millisecond)/speed), ttyMaxIdle)
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		last = c.Ms
		if _, err := w.Write(c.Data); err != nil {
			return err
		}
	}
	return nil
}
