package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/overlay"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// RestoreOptions describe the sandbox a restore makes.
type RestoreOptions struct {
	// Image is the snapshot's image, loaded (and verified) by the caller
	// from SnapshotRecord.ImageDir; its digest must equal the snapshot's.
	// Required.
	Image *image.Image
	// Name, Labels, Extra and Admit are as in sandbox.Options.
	Name   string
	Labels map[string]string
	Extra  []byte
	Admit  func(r sandbox.Resources) error
	// Template is as in sandbox.Options (a warm create's template; a
	// restore of a snapshot has none).
	Template string
	// Tenant is as in sandbox.Options: the new sandbox's tenant.
	Tenant string
	// Timeout bounds the time from the domain's resume to the agent's
	// handshake; 0 means 60 s.
	Timeout time.Duration
}

// Restore starts a NEW sandbox that continues from the snapshot with the
// given name or ID: it copies the snapshot's qcow2 file (pausing the
// source sandbox during the copy if it runs, so QEMU has flushed it),
// starts a domain of the same shape paused, loads the snapshot, resumes
// it, reconnects the guest agent, sets the guest's clock to the host's and
// gives the guest its own identity (hostname = the new domain name, a new
// /etc/machine-id if the image has one; its own tap and addresses, but
// the source's MAC, which the NIC's saved state keeps: see keepGuestMAC)
// and fresh randomness (sandbox.RefreshGuest reseeds it; the new
// domain's VM generation ID, see domain.Spec.GenID).
// Restoring one snapshot twice gives two independent sandboxes.
//
// Errors: sandbox.ErrNoSnapshot; ErrSnapshotUnusable when the image
// changed or the file is gone or corrupt; ErrNameTaken; ErrNoSpace; the
// admission error; ErrGuestDied/ErrBootTimeout when the restored guest
// does not answer. A failed step's error says "restore step <name>: …";
// nothing is left (domain, overlay copy, record).
func (s *Service) Restore(ctx context.Context, ref string, opts RestoreOptions) (*sandbox.Sandbox, error) {
	if _, err := s.Snapshotter(); err != nil {
		return nil, err
	}
	r, err := s.Get(ref)
	if err != nil {
		return nil, err
	}
	if opts.Image == nil {
		return nil, fmt.Errorf("%w: restore of %q: no image", sandbox.ErrInvalid, r.Name)
	}
	if opts.Image.Digest != r.ImageDigest {
		return nil, fmt.Errorf("%w: snapshot %q was taken on image %s (sha256:%s) and %s now holds sha256:%s: a snapshot only restores onto the exact image it was taken on; put that image back or remove the snapshot", sandbox.ErrSnapshotUnusable, r.Name, r.ImageName, r.ImageDigest, r.ImageDir, opts.Image.Digest)
	}
	if _, err := os.Stat(r.File); err != nil {
		return nil, fmt.Errorf("%w: snapshot %q: its file %s is gone (%v): remove the snapshot with `agentbox snapshot rm %s`", sandbox.ErrSnapshotUnusable, r.Name, r.File, err, r.Name)
	}
	// The file must read as qcow2 and still hold the tag (qemu-img shares
	// the lock of a running source).
	tags, err := overlay.Snapshots(ctx, r.File)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot %q: its file %s is damaged: %v: remove the snapshot with `agentbox snapshot rm %s`", sandbox.ErrSnapshotUnusable, r.Name, r.File, err, r.Name)
	}
	if !slices.ContainsFunc(tags, func(o overlay.Snapshot) bool { return o.Tag == r.Tag }) {
		return nil, fmt.Errorf("%w: snapshot %q: its file %s no longer holds tag %s: remove the snapshot with `agentbox snapshot rm %s`", sandbox.ErrSnapshotUnusable, r.Name, r.File, r.Tag, r.Name)
	}
	var base sandbox.Record
	if len(r.Source) > 0 {
		if err := json.Unmarshal(r.Source, &base); err != nil {
			return nil, fmt.Errorf("%w: snapshot %q: its record is unreadable: %v", sandbox.ErrSnapshotUnusable, r.Name, err)
		}
	}
	src := Source{
		Name: r.Name, File: r.File, Tag: r.Tag, Spec: r.Spec, Base: base,
		Accel:     accel.Choice{DomainType: r.DomainType, Accel: accel.Mode(r.Accel), Reason: "restored from snapshot " + r.Name},
		VCPUs:     r.VCPUs,
		MemoryMiB: r.MemoryMiB,
	}
	if sb, err := s.m.Get(r.SandboxID); err == nil && sb.Overlay == r.File {
		src.Running = sb
	}
	return s.RestoreFrom(ctx, src, opts)
}

// Source is what a restore starts from: a tag in a qcow2 file and the
// domain description it was saved with (a snapshot, or a warm template).
type Source struct {
	// Name names it in messages and logs.
	Name string
	// File is the qcow2 file holding Tag.
	File, Tag string
	// Spec is the domain description the state was saved with.
	Spec domain.Spec
	// Accel, VCPUs and MemoryMiB (MiB) are the saved domain's.
	Accel     accel.Choice
	VCPUs     int
	MemoryMiB int
	// Running is the source sandbox while its domain holds File (paused
	// for the copy, under its operation lock: see copyFile), or nil.
	Running *sandbox.Sandbox
	// Base is the source sandbox's record when the state was saved: the
	// restored record starts from it, so what other parts of the manager
	// keep there (resources, network policy) carries over.
	Base sandbox.Record
	// Memory, if set, is the restored domain's memory backend (a warm
	// memory template's clone: its RAM file mapped copy-on-write, waiting
	// for its device state); nil gives it the Private form of the saved
	// spec's (see domain.MemoryBackend.Private).
	Memory *domain.MemoryBackend
	// Load, if set, replaces the snapshot load: it loads the saved state
	// into the domain started paused (a memory template's device state,
	// see vmctl/sandbox/warm), and LoadInFinish moves it from Prepare to
	// Finish (a pooled member then holds a domain still waiting for it).
	Load         *sandbox.Step
	LoadInFinish bool
}

// policy is the network policy the restored sandbox gets: its source's.
func (src Source) policy() netpolicy.Policy {
	if src.Base.Network != nil {
		return src.Base.Network.Policy
	}
	return netpolicy.Policy{}
}

// RestoreFrom restores a new sandbox from src: the register step, then
// the steps of Prepare and Finish in one run.
func (s *Service) RestoreFrom(ctx context.Context, src Source, opts RestoreOptions) (*sandbox.Sandbox, error) {
	snap, err := s.Snapshotter()
	if err != nil {
		return nil, err
	}
	b, err := s.newBuild(src, opts.Image)
	if err != nil {
		return nil, err
	}
	steps := append([]sandbox.Step{s.register(opts)}, s.prepareSteps(snap, src)...)
	if err := b.Run(ctx, "restore", append(steps, s.finishSteps(snap, src, opts)...)...); err != nil {
		return nil, err
	}
	return s.done(ctx, b, src)
}

// Prepare makes a sandbox from src up to its domain, started paused with
// the saved state loaded, but not registered: what a warm pool keeps.
// Finish completes it; Build.Abort throws it away. On error nothing is
// left.
func (s *Service) Prepare(ctx context.Context, src Source, img *image.Image) (*sandbox.Build, error) {
	snap, err := s.Snapshotter()
	if err != nil {
		return nil, err
	}
	b, err := s.newBuild(src, img)
	if err != nil {
		return nil, err
	}
	if err := b.Run(ctx, "restore", s.prepareSteps(snap, src)...); err != nil {
		return nil, err
	}
	return b, nil
}

// Finish turns b, made by Prepare from src, into the requested running
// sandbox: it registers it (name, admission, record), resumes its domain,
// reconnects the agent and gives the guest its clock, identity and
// network. On error everything b made is undone.
func (s *Service) Finish(ctx context.Context, b *sandbox.Build, src Source, opts RestoreOptions) (*sandbox.Sandbox, error) {
	snap, err := s.Snapshotter()
	if err != nil {
		return nil, errors.Join(err, b.Abort(ctx))
	}
	b.Started = time.Now()
	b.Times = sandbox.RestoreTimes{}
	if err := b.Run(ctx, "restore", append([]sandbox.Step{s.register(opts)}, s.finishSteps(snap, src, opts)...)...); err != nil {
		return nil, err
	}
	return s.done(ctx, b, src)
}

// newBuild makes the new sandbox of a restore from src.
func (s *Service) newBuild(src Source, img *image.Image) (*sandbox.Build, error) {
	base := src.Base
	shape := sandbox.Shape{
		Image: img, Accel: src.Accel, VCPUs: src.VCPUs, MemoryMiB: src.MemoryMiB,
		GuestAgentChannel: src.Spec.GuestAgentSocket != "", From: &base,
	}
	if src.Memory != nil {
		// A clone of a memory template: admission counts the template's
		// RAM once, not in every clone (sandbox.SharedMemoryOf).
		shared, err := sandbox.SharedMemoryOf(src.Memory.File)
		if err != nil {
			return nil, err
		}
		shape.SharedMemory = shared
	}
	b, err := s.m.NewBuild(shape)
	if err != nil {
		return nil, err
	}
	// The domain: the source's devices with our own name, paths and
	// identity.
	sb := b.Sandbox
	spec := src.Spec
	spec.Name, spec.SandboxID, spec.Owner = sb.Domain, sb.ID, s.cfg.Owner
	spec.Image = img.Digest
	spec.Disk, spec.AgentSocket, spec.ConsoleLog = sb.Overlay, sb.AgentSocket, sb.ConsoleLog
	spec.DiskBacking = img.Disk // not the copy's header's (domain.Spec.DiskBacking)
	spec.GuestAgentSocket = sb.GuestAgentSocket
	spec.UUID = ""
	spec.MemoryBackend = spec.MemoryBackend.Private()
	if src.Memory != nil {
		spec.MemoryBackend = src.Memory
	}
	spec.Cmdline = hostnameRE.ReplaceAllString(spec.Cmdline, "agentbox.hostname="+sb.Domain)
	b.Spec = spec
	return b, nil
}

// register is the core's register step with opts' name, labels, extra
// and admission.
func (s *Service) register(opts RestoreOptions) sandbox.Step {
	return sandbox.StepRegister(sandbox.Admission{Name: opts.Name, Labels: opts.Labels, Template: opts.Template, Tenant: opts.Tenant, Extra: opts.Extra, Admit: opts.Admit})
}

// prepareSteps: the directory, the copy of src's file, the network (the
// source's policy on a network of our own: a NIC exactly when the source
// had one), the guest's MAC, the domain started paused (with the limits,
// as a create starts it) and the load of the saved state.
func (s *Service) prepareSteps(snap sandbox.Snapshotter, src Source) []sandbox.Step {
	load := sandbox.StepLoad(snap, src.Tag, fmt.Sprintf("snapshot %q (remove the snapshot if it stays unusable)", src.Name))
	if src.Load != nil {
		load = *src.Load
	}
	steps := []sandbox.Step{
		sandbox.StepDir(),
		{Name: "copy", Run: func(ctx context.Context, b *sandbox.Build) error {
			return s.copyFile(ctx, src, b.Sandbox.Overlay, &b.Times)
		}},
		sandbox.StepNetwork(src.policy()),
		{Name: "mac", Run: func(ctx context.Context, b *sandbox.Build) error {
			keepGuestMAC(b, src.Spec)
			return nil
		}},
		sandbox.StepDomain(snap.StartDomainPaused),
	}
	if src.LoadInFinish {
		return steps
	}
	return append(steps, load)
}

// finishSteps: resume the loaded domain, reconnect the agent (a new
// hello ends the session the guest was in when the state was saved, see
// vmctl/guestagent's sessionConn), set the guest's clock and identity,
// and mark the sandbox running.
func (s *Service) finishSteps(snap sandbox.Snapshotter, src Source, opts RestoreOptions) []sandbox.Step {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	var agentStart time.Time
	var steps []sandbox.Step
	if src.LoadInFinish && src.Load != nil {
		steps = append(steps, *src.Load)
	}
	return append(steps, []sandbox.Step{
		sandbox.StepResumeDomain(snap),
		// Times.Agent counts from here.
		{Name: "agent timer", Run: func(ctx context.Context, b *sandbox.Build) error {
			agentStart = time.Now()
			return nil
		}},
		sandbox.StepAgent(timeout),
		{Name: "identity", Run: func(ctx context.Context, b *sandbox.Build) error {
			// Every fork of one snapshot starts from the same CRNG state:
			// RefreshGuest reseeds it from the host (the genid device does
			// too where the guest kernel has the vmgenid driver). An image
			// whose agent predates the operation restores with a warning.
			if err := sandbox.RefreshGuest(ctx, b.Agent); errors.Is(err, sandbox.ErrReseedUnsupported) {
				s.log.Warn("restored guest not reseeded", "sandbox", b.Sandbox.ID, "err", err)
			} else if err != nil {
				return fmt.Errorf("refresh the restored guest: %w", err)
			}
			machineID, err := newMachineID()
			if err != nil {
				return err
			}
			if _, err := b.Agent.SetIdentity(ctx, b.Sandbox.Domain, machineID); err != nil {
				return fmt.Errorf("give the restored guest its identity: %w", err)
			}
			b.Times.Agent = time.Since(agentStart)
			return nil
		}},
		sandbox.StepRunning(),
	}...)
}

// done hands b's sandbox over and gives the guest its own addresses (it
// still has its source's; the NIC keeps the source's MAC in its migrated
// state, hence anyMAC). A failure there removes the sandbox.
func (s *Service) done(ctx context.Context, b *sandbox.Build, src Source) (*sandbox.Sandbox, error) {
	b.Done()
	sb := b.Sandbox
	if err := sb.ConfigureGuestNetwork(ctx, true); err != nil {
		return nil, errors.Join(fmt.Errorf("configure the restored guest's network: %w", err), s.m.Remove(ctx, sb, true))
	}
	t := sb.LastRestore()
	s.log.Debug("sandbox restored", "sandbox", sb.ID, "domain", sb.Domain, "snapshot", src.Name,
		"copy_ms", t.Copy.Milliseconds(), "source_pause_ms", t.SourcePause.Milliseconds(),
		"start_ms", t.Start.Milliseconds(), "load_ms", t.Load.Milliseconds(),
		"resume_ms", t.Resume.Milliseconds(), "agent_ms", t.Agent.Milliseconds())
	return sb, nil
}

var hostnameRE = regexp.MustCompile(`agentbox\.hostname=\S*`)

// keepGuestMAC makes a restored sandbox's domain and record carry the MAC
// its guest really has. A virtio-net NIC's MAC is part of its saved
// device state (QEMU's virtio-net vmstate carries the MAC the guest
// sees), so after the snapshot is loaded the guest NIC keeps the MAC of
// the domain the snapshot was saved from, whatever the new domain's XML
// says. StepNetwork gave the build's spec and record the provider's MAC
// for the new sandbox; when the saved spec had a NIC, both get the saved
// MAC back instead: `inspect` then shows the guest's real MAC, the
// domain XML agrees with the device state, and a snapshot of this
// sandbox passes it on again. Nothing on the host keys on the MAC (the
// firewall rules match the tap, each sandbox has its own /30), so two
// forks with one MAC do not collide.
func keepGuestMAC(b *sandbox.Build, saved domain.Spec) {
	if saved.Interface == nil || saved.Interface.MAC == "" {
		return
	}
	b.UseGuestMAC(saved.Interface.MAC)
}

// copyFile copies src's qcow2 file to dst (reflink where the filesystem
// has it). A running source is paused for the copy: QMP stop drains and
// flushes its block I/O, so the copy is consistent. The source's
// operation lock is held meanwhile, so no pause, resume, stop or remove
// of it interleaves: a pause in memory during the copy would be undone by
// the copy's resume (the sandbox recorded paused, its vCPUs running), a
// pause to disk would leave the copy's resume without a domain. It is
// taken before the file's lock, in the order Remove takes them.
func (s *Service) copyFile(ctx context.Context, src Source, dst string, times *sandbox.RestoreTimes) error {
	if src.Running == nil {
		return s.copyLocked(ctx, src, dst, times)
	}
	return src.Running.Exclusive(func() error { return s.copyLocked(ctx, src, dst, times) })
}

// copyLocked is copyFile under the source's operation lock (if any).
func (s *Service) copyLocked(ctx context.Context, src Source, dst string, times *sandbox.RestoreTimes) (err error) {
	lock := s.FileLock(src.File)
	lock.Lock()
	defer lock.Unlock()
	start := time.Now()
	if sb := src.Running; sb != nil && sb.State() == sandbox.StateRunning {
		snap, serr := s.Snapshotter()
		if serr != nil {
			return serr
		}
		if err := snap.PauseDomain(ctx, sb.Domain); err != nil {
			return fmt.Errorf("pause source sandbox %s for the copy: %w", sb.ID, err)
		}
		defer func() { // err is copyLocked's result
			if rerr := snap.ResumeDomain(context.WithoutCancel(ctx), sb.Domain); rerr != nil {
				err = errors.Join(err, fmt.Errorf("resume source sandbox %s: %w", sb.ID, rerr))
			}
			times.SourcePause = time.Since(start)
		}()
	}
	if err := overlay.Copy(ctx, src.File, dst); err != nil {
		if NoSpace(err, dst) {
			return fmt.Errorf("%w: copy snapshot %q: %v: free space under %s and retry", sandbox.ErrNoSpace, src.Name, err, filepath.Dir(dst))
		}
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: snapshot %q: its file %s is gone: remove the snapshot", sandbox.ErrSnapshotUnusable, src.Name, src.File)
		}
		return fmt.Errorf("copy snapshot %q: %w", src.Name, err)
	}
	times.Copy = time.Since(start)
	return nil
}

// newMachineID returns a random systemd machine id: 32 lowercase hex
// digits (machine-id(5)).
func newMachineID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
