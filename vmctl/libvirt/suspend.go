package libvirt

import (
	"context"
	"errors"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// SuspendDomain stops the vCPUs of the domain called name
// (virDomainSuspend; QEMU's "stop", which drains and flushes block I/O).
// libvirt records the state as paused. A domain already paused is not an
// error. Errors wrap [ErrDomainNotFound] or [ErrNotRunning].
func (c *Conn) SuspendDomain(ctx context.Context, name string) error {
	err := c.do(ctx, false, func(lv *golibvirt.Libvirt) error {
		d, err := lv.DomainLookupByName(name)
		if err != nil {
			return err
		}
		if s, _, err := lv.DomainGetState(d, 0); err == nil && stateOf(s) == StatePaused {
			return nil
		}
		return lv.DomainSuspend(d)
	})
	return mapErr("suspend domain "+name, err)
}

// ResumeDomain lets the vCPUs of the paused domain called name run again
// (virDomainResume; QEMU's "cont"). A domain libvirt already believes
// running is not an error. Errors wrap [ErrDomainNotFound] or
// [ErrNotRunning].
func (c *Conn) ResumeDomain(ctx context.Context, name string) error {
	err := c.do(ctx, false, func(lv *golibvirt.Libvirt) error {
		d, err := lv.DomainLookupByName(name)
		if err != nil {
			return err
		}
		if s, _, err := lv.DomainGetState(d, 0); err == nil && stateOf(s) == StateRunning {
			return nil
		}
		return lv.DomainResume(d)
	})
	err = mapErr("resume domain "+name, err)
	var lerr golibvirt.Error
	if errors.As(err, &lerr) && golibvirt.ErrorNumber(lerr.Code) == golibvirt.ErrOperationInvalid && containsFold(lerr.Message, "not paused") {
		return nil
	}
	return err
}
