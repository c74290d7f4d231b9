package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-qemu/qemu"
	"github.com/digitalocean/go-qemu/qmp/raw"
)

// fakeQEMU is a scripted Transport for one domain. handle answers every
// command; events are what the test sends on the event stream.
type fakeQEMU struct {
	t      *testing.T
	handle func(verb string, args json.RawMessage) (json.RawMessage, error)

	mu       sync.Mutex
	sent     []string // verbs, in order
	cmds     []json.RawMessage
	events   chan Event
	subs     int
	noEvents bool
}

func newFake(t *testing.T, handle func(verb string, args json.RawMessage) (json.RawMessage, error)) *fakeQEMU {
	return &fakeQEMU{t: t, handle: handle, events: make(chan Event, 16)}
}

func (f *fakeQEMU) MonitorCommand(ctx context.Context, domain string, cmd []byte) (json.RawMessage, error) {
	if domain != "dom" {
		f.t.Errorf("command for domain %q", domain)
	}
	var c struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(cmd, &c); err != nil {
		f.t.Fatalf("bad command %s: %v", cmd, err)
	}
	f.mu.Lock()
	f.sent = append(f.sent, c.Execute)
	f.cmds = append(f.cmds, append(json.RawMessage(nil), cmd...))
	f.mu.Unlock()
	return f.handle(c.Execute, c.Arguments)
}

func (f *fakeQEMU) MonitorEvents(ctx context.Context, domain string) (<-chan Event, error) {
	f.mu.Lock()
	f.subs++
	no := f.noEvents
	f.mu.Unlock()
	if no {
		return nil, errors.New("events not available")
	}
	out := make(chan Event)
	go func() {
		defer close(out)
		for {
			select {
			case ev := <-f.events:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (f *fakeQEMU) verbs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sent...)
}

// replyErr is QEMU's error reply as a transport reports it.
type replyErr struct{ class, desc string }

func (e *replyErr) Error() string         { return "qemu error " + e.class + ": " + e.desc }
func (e *replyErr) QMPErrorClass() string { return e.class }

func jobsReply(jobs ...Job) json.RawMessage {
	b, _ := json.Marshal(jobs)
	return b
}

func statusEvent(id, status string) Event {
	return Event{Name: "JOB_STATUS_CHANGE", Data: json.RawMessage(fmt.Sprintf(`{"id":%q,"status":%q}`, id, status)), Time: time.Unix(1, 0)}
}

// TestRunJobEvents: the job concludes, announced by JOB_STATUS_CHANGE;
// its error member decides the result; job-dismiss is always sent.
func TestRunJobEvents(t *testing.T) {
	for _, tc := range []struct {
		name    string
		errText string
	}{{"success", ""}, {"failure", "Error while writing VM state: No space left on device"}} {
		t.Run(tc.name, func(t *testing.T) {
			concluded := make(chan struct{})
			var f *fakeQEMU
			f = newFake(t, func(verb string, args json.RawMessage) (json.RawMessage, error) {
				switch verb {
				case "snapshot-save":
					// The event of a job that is not ours must be ignored.
					f.events <- statusEvent("other", "concluded")
					f.events <- statusEvent("j1", "running")
					return json.RawMessage(`{}`), nil
				case "query-jobs":
					select {
					case <-concluded:
						return jobsReply(Job{ID: "j1", Type: "snapshot-save", Status: "concluded", Error: tc.errText}), nil
					default:
						return jobsReply(Job{ID: "j1", Type: "snapshot-save", Status: "running"}), nil
					}
				case "job-dismiss":
					if string(args) != `{"id":"j1"}` {
						t.Errorf("job-dismiss arguments %s", args)
					}
					return json.RawMessage(`{}`), nil
				}
				t.Errorf("unexpected %s", verb)
				return nil, errors.New("unexpected")
			})
			m := New(f, "dom", Options{PollInterval: time.Hour}) // events only
			go func() {
				// Conclude once the first poll has seen the job running.
				for len(f.verbs()) < 2 {
					time.Sleep(time.Millisecond)
				}
				close(concluded)
				f.events <- statusEvent("j1", "concluded")
			}()
			err := m.SnapshotSave(context.Background(), "j1", "t1", "libvirt-1-format", []string{"libvirt-1-format"})
			if tc.errText == "" && err != nil {
				t.Fatalf("SnapshotSave: %v", err)
			}
			if tc.errText != "" {
				var je *JobError
				if !errors.As(err, &je) || je.Desc != tc.errText || je.ID != "j1" || je.Type != "snapshot-save" {
					t.Fatalf("SnapshotSave error = %v, want JobError %q", err, tc.errText)
				}
			}
			v := f.verbs()
			if v[len(v)-1] != "job-dismiss" {
				t.Errorf("commands %v: job-dismiss not last", v)
			}
			f.mu.Lock()
			first := string(f.cmds[0])
			f.mu.Unlock()
			want := `{"execute":"snapshot-save","arguments":{"job-id":"j1","tag":"t1","vmstate":"libvirt-1-format","devices":["libvirt-1-format"]}}`
			if first != want {
				t.Errorf("command %s, want %s", first, want)
			}
		})
	}
}

// TestRunJobPolls: without any event (lost across a reconnection, or no
// event stream at all) query-jobs polling finds the conclusion.
func TestRunJobPolls(t *testing.T) {
	for _, noEvents := range []bool{false, true} {
		t.Run(fmt.Sprintf("noEvents=%v", noEvents), func(t *testing.T) {
			polls := 0
			f := newFake(t, func(verb string, args json.RawMessage) (json.RawMessage, error) {
				switch verb {
				case "snapshot-delete":
					return json.RawMessage(`{}`), nil
				case "query-jobs":
					polls++
					if polls < 4 {
						return jobsReply(Job{ID: "d1", Type: "snapshot-delete", Status: "running"}), nil
					}
					return jobsReply(Job{ID: "d1", Type: "snapshot-delete", Status: "concluded"}), nil
				case "job-dismiss":
					return json.RawMessage(`{}`), nil
				}
				return nil, errors.New("unexpected " + verb)
			})
			f.noEvents = noEvents
			m := New(f, "dom", Options{PollInterval: time.Millisecond})
			if err := m.SnapshotDelete(context.Background(), "d1", "t1", []string{"libvirt-1-format"}); err != nil {
				t.Fatalf("SnapshotDelete: %v", err)
			}
			want := []string{"snapshot-delete", "query-jobs", "query-jobs", "query-jobs", "query-jobs", "job-dismiss"}
			if got := f.verbs(); !reflect.DeepEqual(got, want) {
				t.Errorf("commands %v, want %v", got, want)
			}
			f.mu.Lock()
			first := string(f.cmds[0])
			f.mu.Unlock()
			if want := `{"execute":"snapshot-delete","arguments":{"job-id":"d1","tag":"t1","devices":["libvirt-1-format"]}}`; first != want {
				t.Errorf("command %s, want %s", first, want)
			}
		})
	}
}

// TestRunJobGap: a gap marker makes the waiter poll at once.
func TestRunJobGap(t *testing.T) {
	var concluded bool
	var f *fakeQEMU
	f = newFake(t, func(verb string, args json.RawMessage) (json.RawMessage, error) {
		switch verb {
		case "snapshot-load":
			return json.RawMessage(`{}`), nil
		case "query-jobs":
			if concluded {
				return jobsReply(Job{ID: "l1", Type: "snapshot-load", Status: "concluded", Error: "Snapshot 'x' does not exist in one or more devices"}), nil
			}
			concluded = true // the event of the conclusion is "lost"
			f.events <- Event{Gap: true}
			return jobsReply(Job{ID: "l1", Type: "snapshot-load", Status: "running"}), nil
		case "job-dismiss":
			return json.RawMessage(`{}`), nil
		}
		return nil, errors.New("unexpected " + verb)
	})
	m := New(f, "dom", Options{PollInterval: time.Hour})
	err := m.SnapshotLoad(context.Background(), "l1", "x", "n", []string{"n"})
	var je *JobError
	if !errors.As(err, &je) || je.Desc != "Snapshot 'x' does not exist in one or more devices" {
		t.Fatalf("SnapshotLoad = %v", err)
	}
	if got, want := f.verbs(), []string{"snapshot-load", "query-jobs", "query-jobs", "job-dismiss"}; !reflect.DeepEqual(got, want) {
		t.Errorf("commands %v, want %v", got, want)
	}
}

// TestRunJobRejected: an error reply to the command itself means no job
// exists: nothing to wait for or dismiss.
func TestRunJobRejected(t *testing.T) {
	f := newFake(t, func(verb string, args json.RawMessage) (json.RawMessage, error) {
		return nil, &replyErr{"GenericError", "Job ID 'j' already in use"}
	})
	m := New(f, "dom", Options{})
	err := m.SnapshotSave(context.Background(), "j", "t", "n", []string{"n"})
	if err == nil || err.Error() != "qmp snapshot-save on dom: qemu error GenericError: Job ID 'j' already in use" {
		t.Fatalf("SnapshotSave = %v", err)
	}
	if got := f.verbs(); !reflect.DeepEqual(got, []string{"snapshot-save"}) {
		t.Errorf("commands %v", got)
	}
}

// TestRunJobLostReply: a command whose reply was lost in transit (not a
// QEMU error reply) is followed by query-jobs: a listed job is waited for
// and dismissed; an unlisted one returns the transport's error.
func TestRunJobLostReply(t *testing.T) {
	for _, listed := range []bool{true, false} {
		t.Run(fmt.Sprintf("listed=%v", listed), func(t *testing.T) {
			lost := errors.New("libvirt unavailable: connection lost during call")
			f := newFake(t, func(verb string, args json.RawMessage) (json.RawMessage, error) {
				switch verb {
				case "snapshot-save":
					return nil, lost
				case "query-jobs":
					if !listed {
						return jobsReply(), nil
					}
					return jobsReply(Job{ID: "j", Type: "snapshot-save", Status: "concluded"}), nil
				}
				return json.RawMessage(`{}`), nil
			})
			m := New(f, "dom", Options{PollInterval: time.Millisecond})
			err := m.SnapshotSave(context.Background(), "j", "t", "n", []string{"n"})
			want := []string{"snapshot-save", "query-jobs"}
			if listed {
				want = append(want, "query-jobs", "job-dismiss")
				if err != nil {
					t.Errorf("SnapshotSave = %v", err)
				}
			} else if !errors.Is(err, lost) {
				t.Errorf("SnapshotSave = %v, want the transport's error", err)
			}
			if got := f.verbs(); !reflect.DeepEqual(got, want) {
				t.Errorf("commands %v, want %v", got, want)
			}
		})
	}
}

// TestRunJobDomainGone: query-jobs failing because the domain is gone
// ends the wait; other failures are retried.
func TestRunJobDomainGone(t *testing.T) {
	gone := errors.New("domain not found")
	polls := 0
	f := newFake(t, func(verb string, args json.RawMessage) (json.RawMessage, error) {
		switch verb {
		case "query-jobs":
			polls++
			if polls < 3 {
				return nil, errors.New("libvirt unavailable")
			}
			return nil, gone
		}
		return json.RawMessage(`{}`), nil
	})
	m := New(f, "dom", Options{PollInterval: time.Millisecond, Gone: func(err error) bool { return errors.Is(err, gone) }})
	err := m.SnapshotSave(context.Background(), "j", "t", "n", []string{"n"})
	if !errors.Is(err, gone) {
		t.Fatalf("SnapshotSave = %v, want the domain-gone error", err)
	}
	if got, want := f.verbs(), []string{"snapshot-save", "query-jobs", "query-jobs", "query-jobs"}; !reflect.DeepEqual(got, want) {
		t.Errorf("commands %v, want %v", got, want)
	}
}

// TestRunJobVanished: a job that disappears from query-jobs before it
// concluded is an error (nothing to dismiss).
func TestRunJobVanished(t *testing.T) {
	f := newFake(t, func(verb string, args json.RawMessage) (json.RawMessage, error) {
		switch verb {
		case "query-jobs":
			return jobsReply(), nil
		}
		return json.RawMessage(`{}`), nil
	})
	m := New(f, "dom", Options{PollInterval: time.Millisecond})
	err := m.SnapshotSave(context.Background(), "j", "t", "n", []string{"n"})
	if err == nil {
		t.Fatal("SnapshotSave of a vanished job succeeded")
	}
	if got := f.verbs(); !reflect.DeepEqual(got, []string{"snapshot-save", "query-jobs"}) {
		t.Errorf("commands %v", got)
	}
}

// TestRunJobCancel: when the caller gives up, job-cancel is sent, the job
// is still waited for and dismissed, and the error wraps ctx's.
func TestRunJobCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := false
	f := newFake(t, func(verb string, args json.RawMessage) (json.RawMessage, error) {
		switch verb {
		case "query-jobs":
			if cancelled {
				return jobsReply(Job{ID: "j", Type: "snapshot-save", Status: "concluded", Error: "job cancelled"}), nil
			}
			cancel()
			return jobsReply(Job{ID: "j", Type: "snapshot-save", Status: "running"}), nil
		case "job-cancel":
			cancelled = true
		}
		return json.RawMessage(`{}`), nil
	})
	m := New(f, "dom", Options{PollInterval: time.Millisecond})
	err := m.SnapshotSave(ctx, "j", "t", "n", []string{"n"})
	var je *JobError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &je) {
		t.Fatalf("SnapshotSave = %v, want context.Canceled joined with the job's error", err)
	}
	want := []string{"snapshot-save", "query-jobs", "job-cancel", "query-jobs", "job-dismiss"}
	if got := f.verbs(); !reflect.DeepEqual(got, want) {
		t.Errorf("commands %v, want %v", got, want)
	}
}

// TestGoQemu drives go-qemu's generated raw.Monitor and its qemu.Domain
// helpers over Monitor: replies, error replies and events.
func TestGoQemu(t *testing.T) {
	f := newFake(t, func(verb string, args json.RawMessage) (json.RawMessage, error) {
		switch verb {
		case "query-status":
			return json.RawMessage(`{"status":"paused","singlestep":false,"running":false}`), nil
		case "query-version":
			return json.RawMessage(`{"qemu":{"major":7,"minor":2,"micro":22},"package":"Debian"}`), nil
		case "query-named-block-nodes":
			if string(args) != `{"flat":true}` {
				t.Errorf("query-named-block-nodes arguments %s", args)
			}
			return json.RawMessage(`[{"node-name":"libvirt-1-format","drv":"qcow2","ro":false,"file":"/x.qcow2","backing_file_depth":1,
				"image":{"filename":"/x.qcow2","format":"qcow2","virtual-size":2147483648,"snapshots":[{"id":"1","name":"t1","vm-state-size":97845583,"date-sec":1795967438,"date-nsec":139677000,"vm-clock-sec":23,"vm-clock-nsec":821070424}]}}]`), nil
		}
		return nil, &replyErr{"CommandNotFound", "The command " + verb + " has not been found"}
	})
	m := New(f, "dom", Options{})
	if err := m.Connect(); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	st, err := raw.NewMonitor(m).QueryStatus()
	if err != nil || st.Status != raw.RunStatePaused || st.Running {
		t.Errorf("raw QueryStatus = %+v, %v", st, err)
	}
	d, err := qemu.NewDomain(m, "dom")
	if err != nil {
		t.Fatalf("qemu.NewDomain: %v", err)
	}
	if s, err := d.Status(); err != nil || s != qemu.StatusPaused {
		t.Errorf("Domain.Status = %v, %v", s, err)
	}
	if v, err := d.Version(); err != nil || v != "7.2.22" {
		t.Errorf("Domain.Version = %q, %v", v, err)
	}
	if _, err := d.BlockJobs(); err == nil || err.Error() != "qemu error CommandNotFound: The command query-block-jobs has not been found" {
		t.Errorf("error reply through go-qemu: %v", err)
	}
	nodes, err := m.QueryNamedBlockNodes(context.Background())
	if err != nil || len(nodes) != 1 || !nodes[0].HasSnapshot("t1") || nodes[0].HasSnapshot("t2") ||
		nodes[0].Image.Snapshots[0].VMStateSize != 97845583 || nodes[0].NodeName != "libvirt-1-format" {
		t.Errorf("QueryNamedBlockNodes = %+v, %v", nodes, err)
	}

	events, done, err := d.Events()
	if err != nil {
		t.Fatalf("Domain.Events: %v", err)
	}
	f.events <- Event{Name: "STOP", Time: time.Unix(5, 7000)}
	ev := <-events
	if ev.Event != "STOP" || ev.Timestamp.Seconds != 5 || ev.Timestamp.Microseconds != 7 {
		t.Errorf("event %+v", ev)
	}
	f.events <- statusEvent("j", "concluded")
	ev = <-events
	if ev.Event != "JOB_STATUS_CHANGE" || ev.Data["id"] != "j" || ev.Data["status"] != "concluded" {
		t.Errorf("event %+v", ev)
	}
	// A gap closes go-qemu's stream (as a broken stream does there).
	f.events <- Event{Gap: true}
	if _, ok := <-events; ok {
		t.Error("event stream still open after a gap")
	}
	close(done)
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := m.Run([]byte(`{"execute":"query-status"}`)); !errors.Is(err, ErrDisconnected) {
		t.Errorf("Run after Disconnect = %v, want ErrDisconnected", err)
	}
}
