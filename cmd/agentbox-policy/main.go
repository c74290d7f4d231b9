// Command agentbox-policy is agentbox's rule-file policy plugin: the
// daemon starts it (`agentbox serve --policy "agentbox-policy --rules
// FILE"`) and asks it, over go-plugin's net/rpc transport, before every
// create, command, file read or write, port forward and network policy.
// It answers from a TOML rule file (vmctl/policy/rules; docs/policy.md):
// deny rules override allow rules, then change rules of the hook apply.
//
// `agentbox-policy --rules FILE --check` checks the file and exits (0: it
// loads), for use before restarting the daemon with it. The file is read
// once, when the plugin starts; the daemon restarts the plugin when it
// fails, so a changed file takes effect when the daemon restarts.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/vmctl/policy"
	"github.com/agentbox/agentbox/vmctl/policy/rules"
)

func main() {
	fs := flag.NewFlagSet("agentbox-policy", flag.ContinueOnError)
	file := fs.String("rules", "", "the TOML rule `FILE` (see docs/policy.md)")
	check := fs.Bool("check", false, "check the rule file and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: agentbox-policy --rules FILE [--check]\n\n"+
			"A policy plugin for `agentbox serve --policy \"agentbox-policy --rules FILE\"`.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *file == "" || fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}
	eng, err := rules.Load(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentbox-policy:", err)
		os.Exit(1)
	}
	if *check {
		fmt.Printf("%s: ok\n", *file)
		return
	}
	policy.Serve(eng)
}
