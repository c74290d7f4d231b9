package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"
)

// writeList prints a listing the way every `ls` does: --json as an
// indented JSON array ([] when empty), -q/--quiet one key per line,
// otherwise table's columns with ages counted up to now.
func writeList[T any](c *cli.Context, list []T, key func(T) string, table func(w io.Writer, list []T, now time.Time) error) error {
	w := c.App.Writer
	switch {
	case c.Bool("json"):
		if list == nil {
			list = []T{}
		}
		return writeJSON(w, list)
	case c.Bool("quiet"):
		for _, v := range list {
			fmt.Fprintln(w, key(v))
		}
		return nil
	}
	return table(w, list, time.Now())
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
