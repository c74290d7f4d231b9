package procs_test

import (
	"context"
	"encoding/json"
	"io"
	"regexp"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent/procs"
)

// wireProc is a command that wrote its output at start and ends when
// done is closed, with exit status 3.
type wireProc struct{ done chan struct{} }

func (p *wireProc) Pid() int                                     { return 7 }
func (p *wireProc) Signal(context.Context, syscall.Signal) error { return nil }
func (p *wireProc) Wait() (agentproto.ExitStatus, error) {
	<-p.done
	return agentproto.ExitStatus{Code: 3}, nil
}

var wireNs = regexp.MustCompile(`"(started|ended)_ns":\d+`)

// TestSnapshotsAreTheWireForm: the table's snapshots are what the agent
// answers (agentproto.ProcInfo, sent as they are): the JSON is the one
// the guest sent when the table had a snapshot type of its own (argv []
// for none, no ended_ns while running), byte for byte but the clock
// readings.
func TestSnapshotsAreTheWireForm(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	ctx := context.Background()
	var p *wireProc
	start := func(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (procs.Proc, error) {
		p = &wireProc{done: make(chan struct{})}
		_, _ = stdout.Write([]byte("hello"))
		return p, nil
	}
	jsonOf := func(in agentproto.ProcInfo) string {
		if in.StartedNs == 0 {
			t.Errorf("%s: no started_ns", in.ID)
		}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		return wireNs.ReplaceAllString(string(b), `"${1}_ns":N`)
	}
	for _, c := range []struct {
		id            string
		req           agentproto.ExecRequest
		stdinOpen     bool
		running, done string
	}{
		{"a", agentproto.ExecRequest{Argv: []string{"sh", "-c", "x"}}, true,
			`{"id":"a","pid":7,"argv":["sh","-c","x"],"state":"running","stdin_open":true,"output_bytes":5,"started_ns":N}`,
			`{"id":"a","pid":7,"argv":["sh","-c","x"],"state":"exited","exit":{"code":3},"output_bytes":5,"started_ns":N,"ended_ns":N}`},
		{"b", agentproto.ExecRequest{Tty: &agentproto.TtySize{Rows: 24, Cols: 80}}, false,
			`{"id":"b","pid":7,"argv":[],"state":"running","tty":{"rows":24,"cols":80},"output_bytes":5,"started_ns":N}`,
			`{"id":"b","pid":7,"argv":[],"state":"exited","exit":{"code":3},"tty":{"rows":24,"cols":80},"output_bytes":5,"started_ns":N,"ended_ns":N}`},
	} {
		info, err := tb.Start(ctx, c.id, c.req, nil, c.stdinOpen, start)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonOf(info); got != c.running {
			t.Errorf("Start %s:\n got %s\nwant %s", c.id, got, c.running)
		}
		if got, _ := tb.Get(c.id); jsonOf(got) != c.running {
			t.Errorf("Get %s:\n got %s\nwant %s", c.id, jsonOf(got), c.running)
		}
		close(p.done)
		end, err := tb.Wait(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonOf(end); got != c.done {
			t.Errorf("Wait %s:\n got %s\nwant %s", c.id, got, c.done)
		}
		if end.EndedNs < end.StartedNs {
			t.Errorf("%s ended (%d) before it started (%d)", c.id, end.EndedNs, end.StartedNs)
		}
	}
}
