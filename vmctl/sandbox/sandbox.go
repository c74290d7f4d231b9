package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/image"
)

// Sandbox is one running virtual machine with its overlay and agent
// connection. Fields are read-only after Create.
type Sandbox struct {
	// ID is 12 lowercase hex digits, unique per sandbox.
	ID string
	// Domain is the libvirt domain name: DomainPrefix + ID.
	Domain string
	// Dir is the sandbox's state directory (overlay, console log).
	Dir string
	// Overlay is the sandbox's qcow2 overlay; its backing file is the image's
	// read-only base disk.
	Overlay string
	// ConsoleLog is the file the guest's serial console is written to.
	ConsoleLog string
	// AgentSocket is the host end of the agent's virtio-serial port.
	AgentSocket string
	// GuestAgentSocket is the host end of qemu-ga's channel, or "".
	GuestAgentSocket string
	// Image is the image the sandbox booted.
	Image *image.Image
	// Accel is the accelerator the domain runs with.
	Accel accel.Choice
	// VCPUs and Memory (MiB) are the resources the domain got.
	VCPUs, Memory int
	// BootTime is the time from domain start to the agent's handshake.
	BootTime time.Duration

	agent     *agent.Client
	stopWatch context.CancelFunc

	stopOnce sync.Once
	stopped  chan struct{}
	stop     Stop
}

// Agent returns the connected guest agent client.
func (sb *Sandbox) Agent() *agent.Client { return sb.agent }

// Stopped is closed when the domain has stopped for any reason.
func (sb *Sandbox) Stopped() <-chan struct{} { return sb.stopped }

func (sb *Sandbox) stoppedNow() bool {
	select {
	case <-sb.stopped:
		return true
	default:
		return false
	}
}

// StopErr describes why the domain stopped, wrapping ErrGuestDied and
// carrying the last console lines; nil while it runs.
func (sb *Sandbox) StopErr() error {
	if !sb.stoppedNow() {
		return nil
	}
	console := ConsoleTail(sb.ConsoleLog, 20)
	reason := sb.stop.Reason
	if strings.Contains(console, "Kernel panic") {
		// With panic=-1 a panic reboots, which on_reboot=destroy turns into
		// an ordinary stop: the console says what it was.
		reason = "kernel panic, " + reason
	}
	if strings.TrimSpace(console) == "" {
		return fmt.Errorf("%w (domain %s %s) before the kernel printed anything: check that --memory (%d MiB) fits the kernel and initrd, and the image's kernel", ErrGuestDied, sb.Domain, reason, sb.Memory)
	}
	return fmt.Errorf("%w (domain %s %s); last console lines:\n%s", ErrGuestDied, sb.Domain, reason, console)
}

// watch closes stopped when the driver reports the domain's end.
func (sb *Sandbox) watch(stops <-chan Stop) {
	if st, ok := <-stops; ok {
		sb.stopOnce.Do(func() {
			sb.stop = st
			close(sb.stopped)
		})
	}
}

// Exec runs a command in the sandbox through the guest agent, streaming its
// stdin, stdout and stderr (see agent.Client.Exec). If the guest dies while
// the command runs, the error wraps ErrGuestDied with the console's last
// lines instead of a bare connection error.
func (sb *Sandbox) Exec(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (agentproto.ExitStatus, error) {
	st, err := sb.agent.Exec(ctx, req, stdin, stdout, stderr)
	if err != nil && ctx.Err() == nil {
		if errors.Is(err, agent.ErrDisconnected) {
			err = fmt.Errorf("guest agent connection lost: %w", err)
		}
		return st, sb.explain(err)
	}
	return st, err
}

// stopEventGrace is how long a broken agent connection waits for the
// domain's lifecycle event, which libvirt sends a little after QEMU exits.
const stopEventGrace = 2 * time.Second

// explain turns err, seen on the agent connection, into the guest's death
// (ErrGuestDied with the console's last lines) when the domain stopped or
// stops within stopEventGrace; otherwise it returns err unchanged.
func (sb *Sandbox) explain(err error) error {
	select {
	case <-sb.stopped:
		return sb.StopErr()
	case <-time.After(stopEventGrace):
		return err
	}
}
