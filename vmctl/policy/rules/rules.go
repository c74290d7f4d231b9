// Package rules is a policy engine for agentbox policy plugins: a TOML
// rule file (BurntSushi/toml) of allow and deny rules and of changes per
// hook, evaluated against a policy.Request. cmd/agentbox-policy serves
// it; docs/policy.md describes the file.
//
// Evaluation is deny-overrides: a request is denied when any [[deny]]
// rule matches it (the first in the file gives the reason); otherwise it
// is allowed when any [[allow]] rule matches, or when none does and
// `default` is "allow" (the default). An allowed request then gets the
// changes of every matching change rule of its hook ([[create]],
// [[exec]], [[file]], [[port]], [[network]]), merged: caps take the
// smallest, lists the union, single values the first rule's.
package rules

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/agentbox/agentbox/vmctl/policy"
)

// Tool permission tags: what a rule's `tools` may name.
const (
	ToolCreate    = "create"
	ToolExec      = "exec"
	ToolFileRead  = "file.read"
	ToolFileWrite = "file.write"
	ToolPort      = "port"
	ToolNetwork   = "network"
)

// allTools in the order the docs list them; "file" names both file tags.
var allTools = []string{ToolCreate, ToolExec, ToolFileRead, ToolFileWrite, ToolPort, ToolNetwork}

// File is a rule file as decoded.
type File struct {
	// Default is the verdict when no allow or deny rule matches: "allow"
	// (also when empty) or "deny".
	Default string `toml:"default"`
	// DefaultReason is the reason of a default deny.
	DefaultReason string `toml:"default_reason"`
	Deny          []Rule `toml:"deny"`
	Allow         []Rule `toml:"allow"`
	// Change rules, by hook.
	Create  []CreateRule  `toml:"create"`
	Exec    []ExecRule    `toml:"exec"`
	Files   []FileRule    `toml:"file"`
	Port    []PortRule    `toml:"port"`
	Network []NetworkRule `toml:"network"`
}

// Match holds a rule's conditions; a rule applies to a request when all
// the conditions it sets hold.
type Match struct {
	// Name names the rule in the audit log; "" means "deny[N]",
	// "exec[N]", ... (1-based, in file order).
	Name string `toml:"name"`
	// Tools are the permission tags the rule applies to (create, exec,
	// file, file.read, file.write, port, network). Empty means those its
	// other conditions imply (argv: exec; paths: file; ports: port;
	// network_modes: network), or all.
	Tools []string `toml:"tools"`
	// Argv is a command pattern: one glob per argument (`*` in a glob is
	// any run of characters); an element that is exactly `*` matches any
	// one argument, a last element `**` any number (none too) of the
	// remaining ones. The first element, without a `/`, also matches the
	// command's base name ("rm" matches "/usr/bin/rm").
	Argv []string `toml:"argv"`
	// Paths are globs of guest paths (cleaned first): `*` and `?` within
	// one path element, an element `**` any number of elements.
	Paths []string `toml:"paths"`
	// Ports are guest ports of port forwards.
	Ports []int `toml:"ports"`
	// NetworkModes are network policy modes (none, allowlist, open).
	NetworkModes []string `toml:"network_modes"`
	// Callers are globs of the caller's ID (uid:1000, token, tls:CN,
	// cli, ...); any may match.
	Callers []string `toml:"callers"`
	// Tenants are globs of the tenant the request acts for
	// (policy.Identity.Tenant); "" (the admin) matches only an empty
	// glob. Any may match.
	Tenants []string `toml:"tenants"`
	// Labels must all be on the sandbox, each value matching its glob.
	Labels map[string]string `toml:"labels"`
	// Templates are globs of the sandbox's template name; any may match.
	Templates []string `toml:"templates"`
}

// Rule is an allow or deny rule.
type Rule struct {
	Match
	// Reason is what the caller is told (deny: required).
	Reason string `toml:"reason"`
}

// CreateRule changes matching creates (policy.CreateChanges).
type CreateRule struct {
	Match
	MaxVCPUs              int               `toml:"max_vcpus"`
	MaxMemoryMiB          int               `toml:"max_memory_mib"`
	MaxTTLSeconds         int64             `toml:"max_ttl_seconds"`
	MaxIdleTimeoutSeconds int64             `toml:"max_idle_timeout_seconds"`
	MaxExecTimeoutMs      int64             `toml:"max_exec_timeout_ms"`
	SetLabels             map[string]string `toml:"set_labels"`
	StripEnv              []string          `toml:"strip_env"`
}

// ExecRule changes matching commands (policy.ExecChanges).
type ExecRule struct {
	Match
	MaxTimeoutMs int64             `toml:"max_timeout_ms"`
	StripEnv     []string          `toml:"strip_env"`
	SetEnv       map[string]string `toml:"set_env"`
	User         string            `toml:"user"`
}

// FileRule changes matching file writes (policy.FileChanges).
type FileRule struct {
	Match
	Owner string `toml:"owner"`
}

// PortRule changes matching port forwards (policy.PortChanges).
type PortRule struct {
	Match
	HostAddr string `toml:"host_addr"`
}

// NetworkRule changes matching network policies (policy.NetworkChanges).
type NetworkRule struct {
	Match
	Mode  string   `toml:"mode"`
	Allow []string `toml:"allow"`
}

// Engine evaluates requests against a loaded rule file.
type Engine struct {
	f File
}

// Load reads and checks the rule file at name.
func Load(name string) (*Engine, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	e, err := Parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return e, nil
}

// Parse decodes and checks a rule file: unknown keys, unknown tools or
// modes, bad globs, a deny without a reason and a change rule that
// changes nothing are errors, all of them joined in one (a TOML syntax
// error alone stops the check).
func Parse(text string) (*Engine, error) {
	var f File
	md, err := toml.Decode(text, &f)
	if err != nil {
		return nil, err
	}
	var errs []error // all of them, so that --check reports every mistake at once
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		errs = append(errs, fmt.Errorf("unknown keys %s (see docs/policy.md for the rule file)", strings.Join(keys, ", ")))
	}
	switch f.Default {
	case "", "allow", "deny":
	default:
		errs = append(errs, fmt.Errorf("default = %q: give \"allow\" or \"deny\"", f.Default))
	}
	named := func(kind string, i int, m *Match) {
		if m.Name == "" {
			m.Name = fmt.Sprintf("%s[%d]", kind, i+1)
		}
		if err := m.check(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
		}
	}
	for i := range f.Deny {
		named("deny", i, &f.Deny[i].Match)
		if strings.TrimSpace(f.Deny[i].Reason) == "" {
			errs = append(errs, fmt.Errorf("%s: a deny rule needs a reason (the caller sees it)", f.Deny[i].Name))
		}
	}
	for i := range f.Allow {
		named("allow", i, &f.Allow[i].Match)
	}
	for i := range f.Create {
		r := &f.Create[i]
		named("create", i, &r.Match)
		if r.changes() == nil {
			errs = append(errs, fmt.Errorf("%s: changes nothing", r.Name))
		}
	}
	for i := range f.Exec {
		r := &f.Exec[i]
		named("exec", i, &r.Match)
		if r.changes() == nil {
			errs = append(errs, fmt.Errorf("%s: changes nothing", r.Name))
		}
	}
	for i := range f.Files {
		r := &f.Files[i]
		named("file", i, &r.Match)
		if r.Owner == "" {
			errs = append(errs, fmt.Errorf("%s: changes nothing (owner)", r.Name))
		}
	}
	for i := range f.Port {
		r := &f.Port[i]
		named("port", i, &r.Match)
		if r.HostAddr == "" {
			errs = append(errs, fmt.Errorf("%s: changes nothing (host_addr)", r.Name))
		}
	}
	for i := range f.Network {
		r := &f.Network[i]
		named("network", i, &r.Match)
		if r.Mode == "" && r.Allow == nil {
			errs = append(errs, fmt.Errorf("%s: changes nothing (mode, allow)", r.Name))
		}
		if r.Mode != "" && !slices.Contains([]string{"none", "allowlist", "open"}, r.Mode) {
			errs = append(errs, fmt.Errorf("%s: mode %q: give none, allowlist or open", r.Name, r.Mode))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Engine{f: f}, nil
}

// check validates a rule's conditions.
func (m *Match) check() error {
	for _, t := range m.Tools {
		if t != "file" && !slices.Contains(allTools, t) {
			return fmt.Errorf("tool %q: give one of %s, file", t, strings.Join(allTools, ", "))
		}
	}
	for i, a := range m.Argv {
		if a == "**" && i != len(m.Argv)-1 {
			return errors.New(`argv: "**" may only be the last element`)
		}
	}
	for _, p := range m.Paths {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("path %q: give an absolute guest path glob", p)
		}
		for _, el := range strings.Split(p, "/") {
			if _, err := path.Match(el, ""); err != nil {
				return fmt.Errorf("path %q: %w", p, err)
			}
		}
	}
	for _, mode := range m.NetworkModes {
		if !slices.Contains([]string{"none", "allowlist", "open"}, mode) {
			return fmt.Errorf("network mode %q: give none, allowlist or open", mode)
		}
	}
	for _, p := range m.Ports {
		if p < 1 || p > 65535 {
			return fmt.Errorf("port %d: give 1..65535", p)
		}
	}
	return nil
}

// tools returns the permission tags the rule applies to.
func (m *Match) tools() []string {
	var out []string
	for _, t := range m.Tools {
		if t == "file" {
			out = append(out, ToolFileRead, ToolFileWrite)
		} else {
			out = append(out, t)
		}
	}
	if len(out) > 0 {
		return out
	}
	if m.Argv != nil {
		out = append(out, ToolExec)
	}
	if m.Paths != nil {
		out = append(out, ToolFileRead, ToolFileWrite)
	}
	if m.Ports != nil {
		out = append(out, ToolPort)
	}
	if m.NetworkModes != nil {
		out = append(out, ToolNetwork)
	}
	if len(out) == 0 {
		return allTools
	}
	return out
}

// Tool returns the permission tag of a request.
func Tool(req policy.Request) string {
	switch req.Hook {
	case policy.HookFile:
		if req.File != nil && req.File.Access == policy.AccessRead {
			return ToolFileRead
		}
		return ToolFileWrite
	default:
		return string(req.Hook)
	}
}

// matches reports whether the rule applies to req. allPaths: a file
// request with several paths (a move) matches when all of them match
// the rule's paths (allow rules), else when any does.
func (m *Match) matches(req policy.Request, allPaths bool) bool {
	if !slices.Contains(m.tools(), Tool(req)) {
		return false
	}
	id := req.Identity
	if m.Callers != nil && !slices.ContainsFunc(m.Callers, func(g string) bool { return policy.MatchKey(g, id.Caller) }) {
		return false
	}
	if m.Tenants != nil && !slices.ContainsFunc(m.Tenants, func(g string) bool { return g == id.Tenant || id.Tenant != "" && policy.MatchKey(g, id.Tenant) }) {
		return false
	}
	for k, g := range m.Labels {
		v, ok := id.Labels[k]
		if !ok || !policy.MatchKey(g, v) {
			return false
		}
	}
	if m.Templates != nil && !slices.ContainsFunc(m.Templates, func(g string) bool { return policy.MatchKey(g, id.Template) }) {
		return false
	}
	if m.Argv != nil && (req.Exec == nil || !MatchArgv(m.Argv, req.Exec.Argv)) {
		return false
	}
	if m.Paths != nil {
		if req.File == nil {
			return false
		}
		hit := func(p string) bool {
			return slices.ContainsFunc(m.Paths, func(g string) bool { return MatchPath(g, p) })
		}
		ps := req.File.Paths()
		if allPaths && !all(ps, hit) || !allPaths && !slices.ContainsFunc(ps, hit) {
			return false
		}
	}
	if m.Ports != nil && (req.Port == nil || !slices.Contains(m.Ports, req.Port.GuestPort)) {
		return false
	}
	if m.NetworkModes != nil && (req.Network == nil || !slices.Contains(m.NetworkModes, req.Network.Mode)) {
		return false
	}
	return true
}

func all(xs []string, f func(string) bool) bool {
	for _, x := range xs {
		if !f(x) {
			return false
		}
	}
	return true
}

// MatchArgv reports whether argv matches pattern (see Match.Argv).
func MatchArgv(pattern, argv []string) bool {
	for i, g := range pattern {
		if g == "**" && i == len(pattern)-1 {
			return true
		}
		if i >= len(argv) {
			return false
		}
		if g == "*" {
			continue
		}
		a := argv[i]
		if policy.MatchKey(g, a) {
			continue
		}
		if i == 0 && !strings.Contains(g, "/") && policy.MatchKey(g, path.Base(a)) {
			continue
		}
		return false
	}
	return len(argv) == len(pattern)
}

// MatchPath reports whether the guest path p (cleaned first, so ".."
// cannot step around a rule) matches glob (see Match.Paths).
func MatchPath(glob, p string) bool {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return matchElems(strings.Split(path.Clean(glob), "/")[1:], elems(path.Clean(p)))
}

func elems(p string) []string {
	if p == "/" {
		return nil
	}
	return strings.Split(p, "/")[1:]
}

func matchElems(g, p []string) bool {
	if len(g) == 0 {
		return len(p) == 0
	}
	if g[0] == "**" {
		for i := 0; i <= len(p); i++ {
			if matchElems(g[1:], p[i:]) {
				return true
			}
		}
		return false
	}
	if len(p) == 0 {
		return false
	}
	if ok, _ := path.Match(g[0], p[0]); !ok {
		return false
	}
	return matchElems(g[1:], p[1:])
}

// Check implements policy.Checker.
func (e *Engine) Check(req policy.Request) (policy.Decision, error) {
	return e.Decide(req), nil
}

// Decide evaluates req: deny-overrides, then the changes of its hook.
func (e *Engine) Decide(req policy.Request) policy.Decision {
	for _, r := range e.f.Deny {
		if r.matches(req, false) {
			return policy.Decision{Verdict: policy.Deny, Reason: r.Reason, Rule: r.Name}
		}
	}
	d := policy.Decision{Verdict: policy.Allow}
	allowed := false
	for _, r := range e.f.Allow {
		if r.matches(req, true) {
			d.Reason, d.Rule, allowed = r.Reason, r.Name, true
			break
		}
	}
	if !allowed && e.f.Default == "deny" {
		reason := e.f.DefaultReason
		if reason == "" {
			reason = fmt.Sprintf("no allow rule lets %s do %s", orUnknown(req.Identity.Caller), Tool(req))
		}
		return policy.Decision{Verdict: policy.Deny, Reason: reason, Rule: "default"}
	}
	var names []string
	switch req.Hook {
	case policy.HookCreate:
		var c policy.CreateChanges
		for _, r := range e.f.Create {
			if r.matches(req, false) {
				names = append(names, r.Name)
				mergeCreate(&c, r.changes())
			}
		}
		if names != nil {
			d.Create = &c
		}
	case policy.HookExec:
		var c policy.ExecChanges
		for _, r := range e.f.Exec {
			if r.matches(req, false) {
				names = append(names, r.Name)
				mergeExec(&c, r.changes())
			}
		}
		if names != nil {
			d.Exec = &c
		}
	case policy.HookFile:
		for _, r := range e.f.Files {
			if Tool(req) == ToolFileWrite && r.matches(req, false) {
				names = append(names, r.Name)
				if d.File == nil {
					d.File = &policy.FileChanges{Owner: r.Owner}
				}
			}
		}
	case policy.HookPort:
		for _, r := range e.f.Port {
			if r.matches(req, false) {
				names = append(names, r.Name)
				if d.Port == nil {
					d.Port = &policy.PortChanges{HostAddr: r.HostAddr}
				}
			}
		}
	case policy.HookNetwork:
		var c policy.NetworkChanges
		for _, r := range e.f.Network {
			if r.matches(req, false) {
				names = append(names, r.Name)
				if c.Mode == "" {
					c.Mode = r.Mode
				}
				if c.Allow == nil && r.Allow != nil {
					c.Allow = slices.Clone(r.Allow)
				}
			}
		}
		if names != nil {
			d.Network = &c
		}
	}
	if names != nil {
		d.Verdict = policy.Modify
		if d.Rule != "" {
			names = append([]string{d.Rule}, names...)
		}
		d.Rule = strings.Join(names, ",")
	}
	return d
}

func orUnknown(s string) string {
	if s == "" {
		return "the caller"
	}
	return s
}

// The change rules as policy changes, nil when they change nothing.

func (r *CreateRule) changes() *policy.CreateChanges {
	c := policy.CreateChanges{MaxVCPUs: r.MaxVCPUs, MaxMemoryMiB: r.MaxMemoryMiB, MaxTTLSeconds: r.MaxTTLSeconds,
		MaxIdleTimeoutSeconds: r.MaxIdleTimeoutSeconds, MaxExecTimeoutMs: r.MaxExecTimeoutMs, SetLabels: r.SetLabels, StripEnv: r.StripEnv}
	if c.MaxVCPUs <= 0 && c.MaxMemoryMiB <= 0 && c.MaxTTLSeconds <= 0 && c.MaxIdleTimeoutSeconds <= 0 && c.MaxExecTimeoutMs <= 0 && len(c.SetLabels) == 0 && len(c.StripEnv) == 0 {
		return nil
	}
	return &c
}

func (r *ExecRule) changes() *policy.ExecChanges {
	c := policy.ExecChanges{MaxTimeoutMs: r.MaxTimeoutMs, StripEnv: r.StripEnv, SetEnv: r.SetEnv, User: r.User}
	if c.MaxTimeoutMs <= 0 && len(c.StripEnv) == 0 && len(c.SetEnv) == 0 && c.User == "" {
		return nil
	}
	return &c
}

// capMin merges two caps: the smaller positive one.
func capMin[T int | int64](a, b T) T {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

func mergeCreate(c *policy.CreateChanges, r *policy.CreateChanges) {
	if r == nil {
		return
	}
	c.MaxVCPUs = capMin(c.MaxVCPUs, r.MaxVCPUs)
	c.MaxMemoryMiB = capMin(c.MaxMemoryMiB, r.MaxMemoryMiB)
	c.MaxTTLSeconds = capMin(c.MaxTTLSeconds, r.MaxTTLSeconds)
	c.MaxIdleTimeoutSeconds = capMin(c.MaxIdleTimeoutSeconds, r.MaxIdleTimeoutSeconds)
	c.MaxExecTimeoutMs = capMin(c.MaxExecTimeoutMs, r.MaxExecTimeoutMs)
	for k, v := range r.SetLabels {
		if c.SetLabels == nil {
			c.SetLabels = map[string]string{}
		}
		if _, ok := c.SetLabels[k]; !ok {
			c.SetLabels[k] = v
		}
	}
	c.StripEnv = union(c.StripEnv, r.StripEnv)
}

func mergeExec(c *policy.ExecChanges, r *policy.ExecChanges) {
	if r == nil {
		return
	}
	c.MaxTimeoutMs = capMin(c.MaxTimeoutMs, r.MaxTimeoutMs)
	c.StripEnv = union(c.StripEnv, r.StripEnv)
	for k, v := range r.SetEnv {
		if c.SetEnv == nil {
			c.SetEnv = map[string]string{}
		}
		if _, ok := c.SetEnv[k]; !ok {
			c.SetEnv[k] = v
		}
	}
	if c.User == "" {
		c.User = r.User
	}
}

func union(a, b []string) []string {
	for _, x := range b {
		if !slices.Contains(a, x) {
			a = append(a, x)
		}
	}
	return a
}
