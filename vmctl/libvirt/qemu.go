package libvirt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// qmpReply is the shape of a QMP (or qemu-ga) reply.
type qmpReply struct {
	Return json.RawMessage `json:"return"`
	Error  *QMPError       `json:"error"`
}

// parseReply returns the "return" member of a QMP/qemu-ga reply, or the
// *QMPError of its "error" member. A reply without "return" yields "{}".
func parseReply(raw string) (json.RawMessage, error) {
	var r qmpReply
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return nil, fmt.Errorf("decode reply %.200q: %w", raw, err)
	}
	if r.Error != nil {
		return nil, r.Error
	}
	if r.Return == nil {
		return json.RawMessage("{}"), nil
	}
	return r.Return, nil
}

// commandName extracts "execute" from a QMP command for error messages.
func commandName(cmd []byte) (string, error) {
	var c struct {
		Execute string `json:"execute"`
	}
	if err := json.Unmarshal(cmd, &c); err != nil {
		return "", fmt.Errorf("command is not a JSON object: %w", err)
	}
	if c.Execute == "" {
		return "", errors.New(`command has no "execute" member`)
	}
	return c.Execute, nil
}

// MonitorCommand sends one QMP command, e.g. {"execute":"query-status"},
// to the domain's QEMU monitor through libvirt
// (virDomainQemuMonitorCommand) and returns the "return" member of the
// reply. A QMP error reply is returned as a *QMPError (errors.As): libvirt
// passes the monitor's reply through verbatim, so go-libvirt reports no
// error for it. Libvirt marks the domain "tainted" (custom-monitor) on
// first use; commands that change state behind libvirt's back (e.g.
// device_del) confuse it and should be avoided.
func (c *Conn) MonitorCommand(ctx context.Context, name string, cmd []byte) (json.RawMessage, error) {
	verb, err := commandName(cmd)
	if err != nil {
		return nil, fmt.Errorf("qmp on %s: %w", name, err)
	}
	var raw string
	err = c.do(ctx, false, func(lv *golibvirt.Libvirt) error {
		d, err := lv.DomainLookupByName(name)
		if err != nil {
			return err
		}
		raw, err = lv.QEMUDomainMonitorCommand(d, string(cmd), 0)
		return err
	})
	if err != nil {
		return nil, mapErr(fmt.Sprintf("qmp %s on %s", verb, name), err)
	}
	ret, err := parseReply(raw)
	if err != nil {
		return nil, fmt.Errorf("qmp %s on %s: %w", verb, name, err)
	}
	return ret, nil
}

// AgentCommand sends one command to QEMU's guest agent (qemu-ga) in the
// domain through libvirt (virDomainQemuAgentCommand), e.g.
// {"execute":"guest-ping"}, and returns the "return" member of the reply.
// The domain needs a channel named org.qemu.guest_agent.0 (see
// domain.Spec.GuestAgentSocket) and qemu-ga running in the guest.
//
// timeout is how long libvirt waits for the agent, rounded up to whole
// seconds; 0 or less means libvirt's default (5 s). Errors wrap
// [ErrAgentUnavailable] when the agent does not answer; an error reply of
// the agent is a *QMPError when libvirt passes it through.
func (c *Conn) AgentCommand(ctx context.Context, name string, cmd []byte, timeout time.Duration) (json.RawMessage, error) {
	verb, err := commandName(cmd)
	if err != nil {
		return nil, fmt.Errorf("guest agent on %s: %w", name, err)
	}
	secs := int32(-1) // VIR_DOMAIN_QEMU_AGENT_COMMAND_DEFAULT
	if timeout > 0 {
		secs = int32(min(math.Ceil(timeout.Seconds()), math.MaxInt32))
	}
	var raw golibvirt.OptString
	err = c.do(ctx, false, func(lv *golibvirt.Libvirt) error {
		d, err := lv.DomainLookupByName(name)
		if err != nil {
			return err
		}
		raw, err = lv.QEMUDomainAgentCommand(d, string(cmd), secs, 0)
		return err
	})
	var lerr golibvirt.Error
	if errors.As(err, &lerr) && golibvirt.ErrorNumber(lerr.Code) == golibvirt.ErrArgumentUnsupported {
		// "QEMU guest agent is not configured": no org.qemu.guest_agent.0
		// channel in the domain.
		return nil, fmt.Errorf("guest agent %s on %s: %w: %w", verb, name, ErrAgentUnavailable, err)
	}
	if err != nil {
		return nil, mapErr(fmt.Sprintf("guest agent %s on %s", verb, name), err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("guest agent %s on %s: empty reply", verb, name)
	}
	ret, err := parseReply(raw[0])
	if err != nil {
		return nil, fmt.Errorf("guest agent %s on %s: %w", verb, name, err)
	}
	return ret, nil
}
