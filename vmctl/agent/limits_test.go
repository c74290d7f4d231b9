package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// listingGuest answers every list with entries of batch entries each,
// named by fill, until it sent total or the host stopped reading.
func listingGuest(t *testing.T, total, batch int, fill string) *agent.Client {
	t.Helper()
	host, guest := net.Pipe()
	fakeGuest(t, guest, func(req agentproto.Request, fr *agentproto.Reader, fw *agentproto.Writer) {
		if req.Op == agentproto.OpPing {
			fw.WriteJSON(agentproto.FrameResponse, agentproto.PingResponse{})
			return
		}
		if req.Op == agentproto.OpProcList {
			list := agentproto.ProcList{}
			for i := 0; i < total; i++ {
				list.Procs = append(list.Procs, agentproto.ProcInfo{ID: "p" + strings.Repeat("0", 3) + string(rune('a'+i%26)), State: agentproto.ProcRunning})
			}
			fw.WriteJSON(agentproto.FrameResponse, list)
			return
		}
		for sent := 0; sent < total; sent += batch {
			b := make([]agentproto.FileInfo, batch)
			for i := range b {
				b[i] = agentproto.FileInfo{Name: fill, Type: agentproto.TypeFile}
			}
			if err := fw.WriteJSON(agentproto.FrameData, b); err != nil {
				return
			}
		}
		fw.WriteFrame(agentproto.FrameDataEnd, nil)
	})
	c, err := agent.Dial(context.Background(), host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// tooLarge checks that err is the 413 too_large answer naming limit and
// count.
func tooLarge(t *testing.T, err error, limit, count int, msg string) {
	t.Helper()
	if !errors.Is(err, agent.ErrTooLarge) || !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("got %v", err)
	}
	if err.Error() != msg {
		t.Fatalf("message %q, want %q", err, msg)
	}
	ae := api.ErrorFrom(err)
	if ae.Status != 413 || ae.Code != "too_large" || ae.Details["limit"] != limit || ae.Details["count"] != count {
		t.Fatalf("answered %d %s %v", ae.Status, ae.Code, ae.Details)
	}
}

// A guest that streams more entries than a listing takes is refused at
// the batch that goes over, with the numbers; the session goes on.
func TestListOverEntries(t *testing.T) {
	c := listingGuest(t, 500000, 1000, "f")
	_, err := c.List(context.Background(), "/d")
	tooLarge(t, err, agent.MaxListEntries, agent.MaxListEntries+1000,
		"agent: list /d: the guest sent 101000 entries of /d: more than 100000, the limit: list a subdirectory")
	if _, err := c.Ping(context.Background()); err != nil {
		t.Fatalf("the session after a refused listing: %v", err)
	}
}

// Entries of long names are held to the byte limit before the count's.
func TestListOverBytes(t *testing.T) {
	c := listingGuest(t, 100000, 10, strings.Repeat("n", 4000))
	_, err := c.List(context.Background(), "/d")
	var count int
	ae := api.ErrorFrom(err)
	if n, ok := ae.Details["count"].(int); ok {
		count = n
	}
	if count <= agent.MaxListBytes || count > agent.MaxListBytes+agentproto.MaxPayload {
		t.Fatalf("count %d: %v", count, err)
	}
	tooLarge(t, err, agent.MaxListBytes, count,
		"agent: list /d: the guest sent "+itoa(count)+" bytes of entries of /d: more than 33554432, the limit: list a subdirectory")
}

// A guest that reports more detached processes than an agent keeps gets
// none of them taken.
func TestProcessesOverLimit(t *testing.T) {
	c := listingGuest(t, agentproto.ProcMax+1, 0, "")
	list, err := c.ListProcesses(context.Background())
	if list != nil {
		t.Fatalf("%d processes taken", len(list))
	}
	tooLarge(t, err, agent.MaxProcs, agent.MaxProcs+1,
		"agent: proc-list: the guest reported 65 detached processes: more than 64, the limit: an agent keeps at most that many: the guest agent is not agentbox's")
	c2 := listingGuest(t, agentproto.ProcMax, 0, "")
	if list, err := c2.ListProcesses(context.Background()); err != nil || len(list) != agentproto.ProcMax {
		t.Fatalf("%d processes, %v", len(list), err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
