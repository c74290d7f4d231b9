package main

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// hoistGlobalFlags moves global flags written after the command name in
// front of it, so that `agentbox serve --socket S --state-dir D` and
// `agentbox exec --socket S work1 -- ls` mean what they say (urfave/cli v2
// only parses an app's flags before the command). Only the flags between
// the command name and its first argument (or "--") move: after that the
// words belong to the command, e.g. the guest's argv. A global flag
// defined by the command itself too stays where it is.
func hoistGlobalFlags(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	global := map[string]bool{} // name → takes a value
	for _, f := range app.Flags {
		for _, n := range f.Names() {
			global[n] = !isBool(f)
		}
	}
	// Skip the app's own flags to find the command name.
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		name, hasValue := flagName(args[i])
		if takes, ok := global[name]; ok && takes && !hasValue {
			i++
		}
		i++
	}
	if i >= len(args) {
		return args
	}
	cmd := app.Command(args[i])
	if cmd == nil {
		return args
	}
	local := map[string]bool{}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			local[n] = !isBool(f)
		}
	}
	var moved, kept []string
	j := i + 1
	for j < len(args) {
		a := args[j]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			break
		}
		name, hasValue := flagName(a)
		if takes, ok := local[name]; ok {
			kept = append(kept, a)
			if takes && !hasValue && j+1 < len(args) {
				kept = append(kept, args[j+1])
				j++
			}
			j++
			continue
		}
		if takes, ok := global[name]; ok {
			moved = append(moved, a)
			if takes && !hasValue && j+1 < len(args) {
				moved = append(moved, args[j+1])
				j++
			}
			j++
			continue
		}
		break // unknown: let the command report it
	}
	if len(moved) == 0 {
		return args
	}
	out := slices.Clone(args[:i])
	out = append(out, moved...)
	out = append(out, args[i])
	out = append(out, kept...)
	return append(out, args[j:]...)
}

// flagName returns the name of a flag word ("--socket=x" → "socket", true).
func flagName(a string) (string, bool) {
	a = strings.TrimLeft(a, "-")
	name, _, hasValue := strings.Cut(a, "=")
	return name, hasValue
}

func isBool(f cli.Flag) bool {
	_, ok := f.(*cli.BoolFlag)
	return ok
}
