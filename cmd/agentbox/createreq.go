package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
)

// createRequest builds a create request from the image directory imageDir
// (--image DIR or a resolved profile; made absolute: the daemon resolves no
// relative paths) and the flags create and run share: --cpus, --memory,
// --accel, --boot-timeout, and the lifetimes and labels of `create` where
// the command has them. The command checks --accel itself, before it
// builds a profile.
func createRequest(c *cli.Context, imageDir string) (api.CreateSandboxRequest, error) {
	var req api.CreateSandboxRequest
	template := c.String("template") // create only: a name of the daemon's (templates.go)
	if imageDir == "" && template == "" {
		return req, errors.New("no image: pass --image DIR (or set AGENTBOX_IMAGE), or a PROFILE; `make test-image` builds one")
	}
	var img string
	if template == "" {
		var err error
		if img, err = filepath.Abs(imageDir); err != nil {
			return req, err
		}
	}
	req = api.CreateSandboxRequest{
		Image:     img,
		Template:  template,
		Name:      c.String("name"),
		VCPUs:     c.Int("cpus"),
		MemoryMiB: c.Int("memory"),
		Accel:     c.String("accel"),
		Priority:  c.String("priority"), // create only (tenants.go)
	}
	if _, ok := api.PriorityRank(req.Priority); !ok {
		return req, fmt.Errorf("--priority %q: use low, normal or high", req.Priority)
	}
	var err error
	if req.Network, err = networkRequest(c); err != nil {
		return req, err
	}
	if err := setResources(c, &req); err != nil { // resources.go
		return req, err
	}
	if req.VCPUs < 0 || req.MemoryMiB < 0 {
		return req, errors.New("--cpus and --memory must be positive")
	}
	bt := c.Duration("boot-timeout")
	if bt < 0 {
		return req, fmt.Errorf("--boot-timeout %s: must be positive", bt)
	}
	req.BootTimeoutMs = bt.Milliseconds()
	if req.Labels, err = parseLabels(c.StringSlice("label")); err != nil {
		return req, err
	}
	if req.Limits.TTLSeconds, err = wholeSeconds(c, "ttl"); err != nil {
		return req, err
	}
	if req.Limits.IdleTimeoutSeconds, err = wholeSeconds(c, "idle-timeout"); err != nil {
		return req, err
	}
	if t := c.Duration("exec-timeout"); t < 0 {
		return req, fmt.Errorf("--exec-timeout %s: must be positive", t)
	} else {
		req.Limits.ExecTimeoutMs = t.Milliseconds()
	}
	if req.Limits.MaxExecs = c.Int("max-execs"); req.Limits.MaxExecs < 0 {
		return req, fmt.Errorf("--max-execs %d: must be positive", req.Limits.MaxExecs)
	}
	if err := setIdleLimits(c, &req); err != nil { // pause.go
		return req, err
	}
	return req, nil
}
