package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/urfave/cli/v2"
)

// defaultConfigFile is read when it exists and no --config is given.
const defaultConfigFile = "/etc/agentbox/config.toml"

// applyConfig reads the TOML config file and sets every flag it names that
// was not set on the command line or through the environment. Keys are long
// flag names ("accel", "state-dir", "memory"); lists become repeated flags.
// One file serves every command: a key that is a flag of another command
// only ("image" for `ls`) is skipped, but a key that no command knows is an
// error, so a typo never silently does nothing.
func applyConfig(c *cli.Context) error {
	path := c.String("config")
	explicit := path != ""
	if !explicit {
		path = defaultConfigFile
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("config: %w", err)
	}
	var values map[string]any
	if err := toml.Unmarshal(data, &values); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	known := map[string]bool{} // flags of this command and the global ones
	elsewhere := map[string]bool{}
	for _, cmd := range c.App.Commands {
		for _, f := range cmd.Flags {
			for _, n := range f.Names() {
				elsewhere[n] = true
			}
		}
	}
	for _, cc := range c.Lineage() {
		if cc.Command != nil {
			for _, f := range cc.Command.Flags {
				for _, n := range f.Names() {
					known[n] = true
				}
			}
		}
	}
	for _, f := range c.App.Flags {
		for _, n := range f.Names() {
			known[n] = true
		}
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if (!known[key] && !elsewhere[key]) || key == "config" {
			return fmt.Errorf("config %s: unknown key %q: keys are long flag names of `agentbox --help` and `agentbox COMMAND --help`", path, key)
		}
		if !known[key] || c.IsSet(key) {
			continue
		}
		if owner, ok := configOwners[key]; ok && c.Command.Name != owner { // templates.go
			continue
		}
		var vals []string
		switch v := values[key].(type) {
		case []any:
			for _, e := range v {
				vals = append(vals, fmt.Sprint(e))
			}
		default:
			vals = []string{fmt.Sprint(v)}
		}
		for _, v := range vals {
			if err := c.Set(key, v); err != nil {
				return fmt.Errorf("config %s: %s = %q: %w", path, key, strings.TrimSpace(v), err)
			}
		}
	}
	return nil
}
