package main

import (
	"io"
	"os"
)

// stdinReader returns f as an io.Reader, or nil (no stdin) when f is nil.
// A typed nil *os.File must not reach the agent client as a non-nil Reader.
func stdinReader(f *os.File) io.Reader {
	if f == nil {
		return nil
	}
	return f
}
