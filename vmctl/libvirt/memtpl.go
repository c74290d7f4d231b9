package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/qmp"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

var _ sandbox.MemoryTemplater = (*Driver)(nil)

// ignoreShared is the migration capability of memory templates: RAM
// blocks mapped share=on are left out of the stream (the template's RAM
// file holds them), and the destination expects them left out.
var ignoreShared = qmp.MigrationCapability{Capability: "x-ignore-shared", State: true}

// migrationTimeout bounds a device-state save or load (hundreds of KB;
// milliseconds normally) after its stream moved.
const migrationTimeout = 2 * time.Minute

// Emulator returns the emulator binary, its version and the canonical
// machine type of domains of domainType and machine
// (virConnectGetDomainCapabilities, virConnectGetVersion), and the
// binary's size and mtime when it can be read from this host.
func (d *Driver) Emulator(ctx context.Context, domainType, machine string) (sandbox.Emulator, error) {
	var e sandbox.Emulator
	var raw string
	err := d.conn.do(ctx, true, func(lv *golibvirt.Libvirt) error {
		var err error
		raw, err = lv.ConnectGetDomainCapabilities(nil, golibvirt.OptString{domain.Arch}, golibvirt.OptString{machine}, golibvirt.OptString{domainType}, 0)
		if err != nil {
			return err
		}
		e.Version, err = lv.ConnectGetVersion()
		return err
	})
	if err != nil {
		return e, mapErr("emulator of "+domainType+"/"+machine, err)
	}
	var caps libvirtxml.DomainCaps
	if err := caps.Unmarshal(raw); err != nil {
		return e, fmt.Errorf("emulator of %s/%s: decode domain capabilities: %w", domainType, machine, err)
	}
	e.Path, e.Machine = caps.Path, caps.Machine
	if fi, err := os.Stat(e.Path); err == nil {
		e.Binary = fmt.Sprintf("%d@%d", fi.Size(), fi.ModTime().UnixNano())
	}
	return e, nil
}

// SaveDeviceState implements sandbox.MemoryTemplater: it sets
// x-ignore-shared, pauses the domain through libvirt, and migrates it to
// a unix socket this process listens on, writing the stream to file.
//
// The issue this follows asked for QEMU's fd: migration with the fd
// passed by getfd; go-libvirt's QEMUDomainMonitorCommandWithFiles sends
// no file descriptors (its RPC call carries none), so the stream goes
// over "unix:" instead, which QEMU's seccomp sandbox allows as well
// (exec: it forbids). The socket is in a private 0700 directory under
// the host's temporary directory: QEMU must reach it (it runs on this
// host, as a user that can).
func (d *Driver) SaveDeviceState(ctx context.Context, name, file string) (err error) {
	m, release, err := d.lockedMonitor(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("device state file: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			os.Remove(file)
		}
	}()
	sock, cleanup, err := d.migrationSocket(ctx, name)
	if err != nil {
		return err
	}
	defer cleanup()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("device state socket: %w", err)
	}
	defer ln.Close()
	if err := d.giveToQEMU(ctx, name, sock); err != nil { // QEMU connects to it
		return err
	}
	if err := m.MigrateSetCapabilities(ctx, ignoreShared); err != nil {
		return notRunning(fmt.Errorf("save device state of %s: %w", name, err))
	}
	if err := d.conn.SuspendDomain(ctx, name); err != nil {
		return notRunning(fmt.Errorf("save device state of %s: pause: %w", name, err))
	}
	if err := m.Migrate(ctx, "unix:"+sock); err != nil {
		return notRunning(fmt.Errorf("save device state of %s: %w", name, err))
	}
	ctx, cancel := context.WithTimeout(ctx, migrationTimeout)
	defer cancel()
	copied := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			copied <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(f, c)
		copied <- err
	}()
	select {
	case err = <-copied:
	case <-ctx.Done():
		ln.Close() // ends a pending Accept
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("save device state of %s: stream: %w", name, err)
	}
	if err := waitMigration(ctx, m); err != nil {
		return fmt.Errorf("save device state of %s: %w", name, err)
	}
	return f.Sync()
}

// LoadDeviceState implements sandbox.MemoryTemplater: it sets
// x-ignore-shared on the domain (started paused with an incoming
// domain.MemoryBackend), has QEMU listen with migrate-incoming on a unix
// socket (see SaveDeviceState for why not fd:) and streams file into
// it; then it turns the capability off again. QEMU exits when the load
// fails: the error then wraps sandbox.ErrNotRunning.
func (d *Driver) LoadDeviceState(ctx context.Context, name, file string) error {
	m, release, err := d.lockedMonitor(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("device state file: %w", err)
	}
	defer f.Close()
	sock, cleanup, err := d.migrationSocket(ctx, name)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := m.MigrateSetCapabilities(ctx, ignoreShared); err != nil {
		return notRunning(fmt.Errorf("load device state into %s: %w", name, err))
	}
	if err := m.MigrateIncoming(ctx, "unix:"+sock); err != nil {
		return notRunning(fmt.Errorf("load device state into %s: %w", name, err))
	}
	ctx, cancel := context.WithTimeout(ctx, migrationTimeout)
	defer cancel()
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", sock)
	if err != nil {
		return fmt.Errorf("load device state into %s: connect: %w", name, err)
	}
	_, cerr := io.Copy(c, f)
	c.Close()
	if err := waitMigration(ctx, m); err != nil {
		return notRunning(fmt.Errorf("load device state into %s: %w", name, errors.Join(err, cerr)))
	}
	// Off again: with it on, a later snapshot-save of the clone (its own
	// snapshots, pause to disk) would write the RAM blocks' addresses into
	// the stream, which a domain without the capability cannot load.
	off := ignoreShared
	off.State = false
	if err := m.MigrateSetCapabilities(ctx, off); err != nil {
		return notRunning(fmt.Errorf("load device state into %s: %w", name, err))
	}
	return nil
}

// waitMigration polls query-migrate until the migration completed
// (nil), failed or was cancelled (an error with QEMU's reason).
func waitMigration(ctx context.Context, m *qmp.Monitor) error {
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		mi, err := m.QueryMigrate(ctx)
		if err != nil {
			return err
		}
		switch mi.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("migration %s: %s", mi.Status, mi.ErrorDesc)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return fmt.Errorf("migration still %q: %w", mi.Status, ctx.Err())
		}
	}
}

// migrationSocket returns the path of a unix socket in a new private
// directory and the function that removes it.
func (d *Driver) migrationSocket(ctx context.Context, name string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "agentbox-state-")
	if err != nil {
		return "", nil, fmt.Errorf("device state socket dir: %w", err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	// A QEMU that runs as a user of its own (domain.QEMUUser) must pass
	// the directory and, for a load, make its socket there: the
	// directory is that user's (0700), no one else's.
	if err := d.giveToQEMU(ctx, name, dir); err != nil {
		cleanup()
		return "", nil, err
	}
	return filepath.Join(dir, "s"), cleanup, nil
}

// giveToQEMU chowns path to the user and group the domain's QEMU process
// runs as (the owner of /proc/PID), unless that is root.
func (d *Driver) giveToQEMU(ctx context.Context, name, path string) error {
	pid, err := d.conn.DomainPID(ctx, name)
	if err != nil {
		return notRunning(fmt.Errorf("QEMU process of %s: %w", name, err))
	}
	fi, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	if err != nil {
		return notRunning(fmt.Errorf("QEMU process of %s: %w", name, err))
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return nil
	}
	if err := os.Chown(path, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("give %s to QEMU's user %d: %w", path, st.Uid, err)
	}
	return nil
}
