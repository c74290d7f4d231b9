package agentproto

import (
	"encoding/json"
	"testing"
)

// TestProcInfoJSON pins the wire form of ProcInfo, which the guest's
// table (vmctl/guestagent/procs) answers as it is: a change of a name,
// tag or omitempty is a protocol change (ProtocolVersion).
func TestProcInfoJSON(t *testing.T) {
	for _, c := range []struct {
		in   ProcInfo
		want string
	}{
		{ProcInfo{ID: "e000001", Pid: 7, Argv: []string{"sh", "-c", "x"}, State: ProcRunning, StdinOpen: true, OutputBytes: 5, StartedNs: 1764680000000000001},
			`{"id":"e000001","pid":7,"argv":["sh","-c","x"],"state":"running","stdin_open":true,"output_bytes":5,"started_ns":1764680000000000001}`},
		{ProcInfo{ID: "b", Pid: 7, Argv: []string{}, State: ProcExited, Exit: &ExitStatus{Code: 3}, Tty: &TtySize{Rows: 24, Cols: 80},
			OutputBytes: 1 << 21, OutputDropped: 1 << 20, StartedNs: 1, EndedNs: 2},
			`{"id":"b","pid":7,"argv":[],"state":"exited","exit":{"code":3},"tty":{"rows":24,"cols":80},"output_bytes":2097152,"output_dropped":1048576,"started_ns":1,"ended_ns":2}`},
		{ProcInfo{ID: "c", Argv: []string{"x"}, State: ProcLost, Error: "sandbox removed", StartedNs: 1, EndedNs: 2},
			`{"id":"c","pid":0,"argv":["x"],"state":"lost","error":"sandbox removed","output_bytes":0,"started_ns":1,"ended_ns":2}`},
	} {
		b, err := json.Marshal(c.in)
		if err != nil || string(b) != c.want {
			t.Errorf("json of %+v:\n got %s (%v)\nwant %s", c.in, b, err, c.want)
		}
	}
	// The state strings are the API's too (api.ProcessRunning, …; vmctl/api
	// is not imported here).
	if ProcRunning != "running" || ProcExited != "exited" || ProcLost != "lost" {
		t.Fatal("process states differ from the api.Process* strings")
	}
}
