package main

import (
	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// serveQEMUUserFlags are serve's flags for QEMU's confinement
// (docs/security.md).
func serveQEMUUserFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "qemu-uid-range", Value: "off", Usage: "run each sandbox's QEMU as a uid and gid of its own from `FIRST-LAST` (e.g. 200000-265535; FIRST is the group of memory-template clones, the rest one per sandbox; ids no account, subuid range or other daemon uses), through libvirt's per-domain DAC label; off runs QEMU as qemu.conf's user. The state dir becomes 0711 and must be reachable, the images readable by others (docs/security.md)"},
	}
}

// qemuUsers parses --qemu-uid-range ("off": nil).
func qemuUsers(c *cli.Context) (*sandbox.IDRange, error) {
	if s := c.String("qemu-uid-range"); s != "off" && s != "" {
		return sandbox.ParseIDRange(s)
	}
	return nil, nil
}
