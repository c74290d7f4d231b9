package warm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
)

// Mode is how warm templates are made and used.
type Mode string

const (
	// ModeMemory (the default where the driver is a
	// sandbox.MemoryTemplater) makes memory templates: the template runs
	// with its RAM in a shared file, its device state is saved without
	// that RAM, and every warm sandbox is a clone that maps the RAM file
	// copy-on-write and loads the small device state (see DESIGN in
	// docs/snapshots.md). Clones share the pages they only read.
	ModeMemory Mode = "memory"
	// ModeSnapshot makes snapshot templates: a "ready" internal snapshot
	// of the template's overlay, which every warm create copies and
	// loads whole (the mechanism before memory templates; kept for
	// drivers without MemoryTemplater and for comparison).
	ModeSnapshot Mode = "snapshot"
)

// ParseMode returns the Mode named s ("" is ModeMemory). Errors:
// sandbox.ErrInvalid.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeMemory:
		return ModeMemory, nil
	case ModeSnapshot:
		return ModeSnapshot, nil
	}
	return "", fmt.Errorf("%w: warm template mode %q: use %q or %q", sandbox.ErrInvalid, s, ModeMemory, ModeSnapshot)
}

// SetMode sets how warm templates are made (ModeMemory by default). A
// template of the other mode is another template (another key).
func (w *Service) SetMode(m Mode) {
	w.mu.Lock()
	w.mode = m
	w.mu.Unlock()
}

// memTemplater returns the driver as a MemoryTemplater when warm creates
// use memory templates.
func (w *Service) memTemplater() (sandbox.MemoryTemplater, bool) {
	w.mu.Lock()
	mode := w.mode
	w.mu.Unlock()
	if mode == ModeSnapshot {
		return nil, false
	}
	mt, ok := w.cfg.Driver.(sandbox.MemoryTemplater)
	return mt, ok
}

// memManifest is what a memory template keeps besides the overlay, in
// manifest.Memory.
type memManifest struct {
	// RAM and State are the names of the RAM file and of the device
	// state file in the template's directory. Both are new for every
	// build (ram-<random>, state-<random>; templates from before have
	// "state"): a VM that writes a RAM file (share=on) never runs on one
	// that clones may still map, and a clone whose template was removed
	// and rebuilt between its domain's start (which maps the old RAM
	// file) and its load (a pool member's, at create) fails to find the
	// old state file rather than loading the new one into the old RAM.
	RAM   string `json:"ram"`
	State string `json:"state"`
	// StateSHA256 is the hex sha256 of the state file, checked before
	// every clone.
	StateSHA256 string `json:"state_sha256"`
	// Key is everything a clone must match; a clone is refused (and the
	// template rebuilt) unless the clone's is equal.
	Key cloneKey `json:"key"`
}

// cloneKey is what a memory template's device state and RAM depend on:
// a clone's QEMU must be the same binary with the same machine, devices
// and memory, its overlay the template's exact overlay (the clone copies
// it), on the same image.
type cloneKey struct {
	// Template is the template's key (image digest, domain type,
	// machine, vCPUs, memory, devices, resources).
	Template    string `json:"template"`
	ImageDigest string `json:"image_digest"`
	// Emulator is the QEMU binary (path, version, canonical machine,
	// size and mtime).
	Emulator sandbox.Emulator `json:"emulator"`
	// MemoryMiB is the guest RAM (MiB), the RAM file's size.
	MemoryMiB int `json:"memory_mib"`
	// Devices is the hex sha256 of the domain XML of the template's spec
	// with every per-sandbox value (names, paths, tap, MAC, limits)
	// blanked, as this build of agentbox renders it: a changed device set
	// changes it.
	Devices string `json:"devices"`
}

// hostnameRE and netCmdlineRE match the kernel command line's
// per-sandbox parameters (the hostname, the network addresses).
var (
	hostnameRE   = regexp.MustCompile(`\s*\bagentbox\.hostname=\S*`)
	netCmdlineRE = regexp.MustCompile(`\s*\bagentbox\.net=\S*`)
)

// devicesHash is cloneKey.Devices of spec.
func devicesHash(spec domain.Spec) (string, error) {
	s := spec
	s.Name, s.SandboxID, s.Owner, s.UUID = "agentbox-template", "template", "", ""
	s.Disk, s.AgentSocket, s.ConsoleLog = "/disk", "/agent.sock", "/console.log"
	s.DiskBacking = "" // the image is in the key already; keys made before it existed still match
	if s.GuestAgentSocket != "" {
		s.GuestAgentSocket = "/qga.sock"
	}
	s.Cmdline = hostnameRE.ReplaceAllString(netCmdlineRE.ReplaceAllString(s.Cmdline, ""), "")
	s.Tune = domain.Tune{}
	s.QEMUUser = nil // each clone runs as its own user
	if s.Interface != nil {
		s.Interface = &domain.Interface{Tap: "tap0", MAC: "02:00:00:00:00:01"}
	}
	s.MemoryBackend = &domain.MemoryBackend{File: "/ram", Incoming: true}
	xml, err := domain.XML(s)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(xml))
	return hex.EncodeToString(sum[:]), nil
}

// memKey returns the clone key a template of key made from spec has on
// this host now.
func (w *Service) memKey(ctx context.Context, mt sandbox.MemoryTemplater, key, digest string, spec domain.Spec) (cloneKey, error) {
	machine := spec.Machine
	if machine == "" {
		machine = domain.DefaultMachine
	}
	emu, err := mt.Emulator(ctx, string(spec.Type), machine)
	if err != nil {
		return cloneKey{}, fmt.Errorf("warm template: %w", err)
	}
	dev, err := devicesHash(spec)
	if err != nil {
		return cloneKey{}, fmt.Errorf("%w: warm template spec: %w", sandbox.ErrInvalid, err)
	}
	return cloneKey{Template: key, ImageDigest: digest, Emulator: emu, MemoryMiB: int(spec.MemoryMiB), Devices: dev}, nil
}

// memTemplate returns the manifest of the memory template for key,
// building it first if there is none or if its clone key differs from
// what this host would give it now (another QEMU, machine, device set:
// such a template is never cloned, it is rebuilt). A template whose files
// are damaged (state file's sha256, RAM file's size) is removed and the
// error wraps sandbox.ErrSnapshotUnusable: the next warm create rebuilds
// it. All of it runs under key's lock and before any QEMU starts.
func (w *Service) memTemplate(ctx context.Context, mt sandbox.MemoryTemplater, key string, opts sandbox.Options) (manifest, error) {
	l := w.lock(key)
	l.Lock()
	defer l.Unlock()
	dir := w.dir(key)
	var man manifest
	data, rerr := os.ReadFile(filepath.Join(dir, "manifest.json"))
	switch {
	case rerr != nil:
	case json.Unmarshal(data, &man) != nil || man.Key != key || man.ImageDigest != opts.Image.Digest || man.Memory == nil:
		w.log.Info("warm template unreadable or not a memory template: rebuilt", "key", key)
	default:
		want, err := w.memKey(ctx, mt, key, opts.Image.Digest, man.Spec)
		if err != nil {
			return manifest{}, err
		}
		if want != man.Memory.Key {
			w.log.Info("warm template's clone key differs from this host's (QEMU binary, machine, devices or memory changed): rebuilt, not cloned",
				"key", key, "template_key", man.Memory.Key, "host_key", want)
			break
		}
		if err := checkMemFiles(dir, man); err != nil {
			if rerr := w.remove(context.WithoutCancel(ctx), key); rerr != nil {
				w.log.Warn("remove damaged warm template", "key", key, "err", rerr)
			}
			return manifest{}, fmt.Errorf("%w: warm template %s: %v (the warm template was removed; the next --warm create rebuilds it)", sandbox.ErrSnapshotUnusable, key, err)
		}
		return man, nil
	}
	if err := w.remove(context.WithoutCancel(ctx), key); err != nil {
		return manifest{}, err
	}
	return w.buildMem(ctx, mt, key, opts)
}

// checkMemFiles checks a memory template's files before a clone: the
// overlay is there, the RAM file has the guest's size, the state file
// its recorded sha256.
func checkMemFiles(dir string, man manifest) error {
	if _, err := os.Stat(filepath.Join(dir, "overlay.qcow2")); err != nil {
		return fmt.Errorf("its overlay: %w", err)
	}
	fi, err := os.Stat(filepath.Join(dir, man.Memory.RAM))
	if err != nil {
		return fmt.Errorf("its RAM file: %w", err)
	}
	if want := int64(man.MemoryMiB) << 20; fi.Size() != want {
		return fmt.Errorf("its RAM file %s has %d bytes, want %d: damaged", man.Memory.RAM, fi.Size(), want)
	}
	sum, err := fileSHA256(filepath.Join(dir, man.Memory.State))
	if err != nil {
		return fmt.Errorf("its device state: %w", err)
	}
	if sum != man.Memory.StateSHA256 {
		return fmt.Errorf("its device state file %s has sha256 %s, want %s: damaged", man.Memory.State, sum, man.Memory.StateSHA256)
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// buildMem boots a sandbox cold with its RAM in a new shared file in a
// new directory, waits for its agent, saves its device state without the
// RAM, destroys it and keeps RAM file, state file and overlay (mode
// 0400: nothing writes them again) as the template of key. Call it under
// key's lock, with no template of key left.
func (w *Service) buildMem(ctx context.Context, mt sandbox.MemoryTemplater, key string, opts sandbox.Options) (_ manifest, err error) {
	ctx = context.WithoutCancel(ctx) // one build serves every waiting create
	start := time.Now()
	dir := w.dir(key)
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return manifest{}, fmt.Errorf("warm template dir: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	id, err := sandbox.NewID()
	if err != nil {
		return manifest{}, err
	}
	mm := &memManifest{RAM: "ram-" + id, State: "state-" + id}
	bo := opts
	bo.Name, bo.Labels, bo.Extra, bo.Tenant = "", map[string]string{Label: key}, nil, "" // the template is no tenant's
	// The RAM file is written where clones will find it: the directory
	// is renamed only after the template's domain is gone.
	bo.MemoryBackend = &domain.MemoryBackend{File: filepath.Join(tmp, mm.RAM), Shared: true}
	sb, err := w.m.Create(ctx, bo)
	if err != nil {
		return manifest{}, fmt.Errorf("build warm template (cold boot): %w", err)
	}
	defer func() {
		if rerr := w.m.Remove(ctx, sb, true); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the template's sandbox: %w", rerr))
		}
	}()
	rec := sb.Record()
	if err := mt.SaveDeviceState(ctx, sb.Domain, filepath.Join(tmp, mm.State)); err != nil {
		if snapshot.NoSpace(err, sb.Overlay) {
			err = fmt.Errorf("%w: %v: free space under %s", sandbox.ErrNoSpace, err, w.cfg.StateDir)
		}
		return manifest{}, fmt.Errorf("build warm template: save device state: %w", err)
	}
	if err := w.m.Stop(ctx, sb, "warm template saved"); err != nil {
		return manifest{}, fmt.Errorf("build warm template: stop: %w", err)
	}
	if mm.StateSHA256, err = fileSHA256(filepath.Join(tmp, mm.State)); err != nil {
		return manifest{}, fmt.Errorf("build warm template: %w", err)
	}
	spec := *rec.Spec
	spec.MemoryBackend = &domain.MemoryBackend{File: filepath.Join(dir, mm.RAM), Shared: true}
	if mm.Key, err = w.memKey(ctx, mt, key, opts.Image.Digest, spec); err != nil {
		return manifest{}, err
	}
	if err := os.Rename(sb.Overlay, filepath.Join(tmp, "overlay.qcow2")); err != nil {
		return manifest{}, fmt.Errorf("keep warm template: %w", err)
	}
	if err := w.m.Reclaim(filepath.Join(tmp, "overlay.qcow2")); err != nil { // not the build's QEMU user's any more
		return manifest{}, fmt.Errorf("keep warm template: %w", err)
	}
	for _, f := range []string{"overlay.qcow2", mm.State} {
		os.Chmod(filepath.Join(tmp, f), 0o400)
	}
	// Root's again (the build's QEMU user is freed with its sandbox), and
	// open to the clones: their group, or 0400 without QEMU users.
	if err := w.m.ShareTemplateRAM(filepath.Join(tmp, mm.RAM)); err != nil {
		return manifest{}, fmt.Errorf("keep warm template: %w", err)
	}
	rec.Spec = &spec
	man := manifest{
		Key: key, ImageDigest: opts.Image.Digest, Spec: spec, VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB,
		CreatedAt: time.Now().UTC(), BuildMs: time.Since(start).Milliseconds(), Source: rec, Memory: mm, Group: w.groupOf(opts.Tenant),
	}
	data, _ := json.MarshalIndent(man, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "manifest.json"), append(data, '\n'), 0o600); err != nil {
		return manifest{}, fmt.Errorf("keep warm template: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return manifest{}, fmt.Errorf("keep warm template: %w", err)
	}
	w.log.Info("warm template built", "mode", ModeMemory, "key", key, "image", opts.Image.Manifest.Name, "build_ms", man.BuildMs)
	w.prune(key, opts.Image.Dir, opts.Image.Digest)
	w.evict(key)
	return man, nil
}

// memSource is what a clone of memory template man starts from: the
// template's overlay (copied, reflinked where the file system can), its
// spec with the RAM file mapped copy-on-write and "-incoming defer",
// and the load of its device state, which runs at Finish so that a pool
// holds domains that have not loaded anything yet.
func (w *Service) memSource(mt sandbox.MemoryTemplater, man manifest, src snapshot.Source) snapshot.Source {
	dir := w.dir(man.Key)
	src.Memory = &domain.MemoryBackend{File: filepath.Join(dir, man.Memory.RAM), Incoming: true}
	state := filepath.Join(dir, man.Memory.State)
	src.Load = &sandbox.Step{Name: "load", Run: func(ctx context.Context, b *sandbox.Build) error {
		b.Times.Start = time.Since(b.Started)
		t := time.Now()
		if err := mt.LoadDeviceState(ctx, b.Sandbox.Domain, state); err != nil {
			return fmt.Errorf("%w: load warm template %s into sandbox %s: %v: its files may be damaged", sandbox.ErrSnapshotUnusable, man.Key, b.Sandbox.ID, err)
		}
		b.Times.Load = time.Since(t)
		return nil
	}}
	src.LoadInFinish = true
	return src
}
