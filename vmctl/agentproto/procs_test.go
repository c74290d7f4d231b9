package agentproto

import (
	"bytes"
	"testing"
)

func TestProcChunkRoundTrip(t *testing.T) {
	c := ProcChunk{Stream: ProcStderr, Offset: 1<<40 + 3, Data: []byte("hello")}
	p := AppendProcChunk(nil, c)
	got, err := DecodeProcChunk(p)
	if err != nil || got.Stream != c.Stream || got.Offset != c.Offset || !bytes.Equal(got.Data, c.Data) {
		t.Fatalf("DecodeProcChunk = %+v, %v; want %+v", got, err, c)
	}
	for _, bad := range [][]byte{nil, {1, 0, 0}, AppendProcChunk(nil, ProcChunk{Stream: 3}), AppendProcChunk(nil, ProcChunk{Stream: 1, Offset: -1})} {
		if _, err := DecodeProcChunk(bad); err == nil {
			t.Errorf("DecodeProcChunk(%x) accepted", bad)
		}
	}
}

func TestProcRequestValidate(t *testing.T) {
	ok := []Request{
		{Op: OpProcSpawn, ProcSpawn: &ProcSpawnRequest{ID: "e000001", Exec: ExecRequest{Argv: []string{"sleep", "1"}}}},
		{Op: OpProcList, ProcList: &ProcListRequest{}},
		{Op: OpProcWait, Proc: &ProcRef{ID: "a.b_c-1"}},
		{Op: OpProcOutput, ProcOutput: &ProcOutputRequest{ID: "x", Offset: 5, Follow: true}},
		{Op: OpProcStdin, ProcStdin: &ProcStdinRequest{ID: "x"}},
		{Op: OpProcSignal, ProcSignal: &ProcSignalRequest{ID: "x", Signal: 15}},
		{Op: OpProcForget, Proc: &ProcRef{ID: "x"}},
		{Op: OpProcResize, ProcResize: &ProcResizeRequest{ID: "x", Tty: TtySize{Rows: 50, Cols: 132}}},
	}
	for _, r := range ok {
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", r.Op, err)
		}
	}
	bad := []Request{
		{Op: OpProcSpawn},
		{Op: OpProcSpawn, ProcSpawn: &ProcSpawnRequest{ID: "../x", Exec: ExecRequest{Argv: []string{"true"}}}},
		{Op: OpProcSpawn, ProcSpawn: &ProcSpawnRequest{ID: "x"}},
		{Op: OpProcList},
		{Op: OpProcWait, Proc: &ProcRef{}},
		{Op: OpProcOutput, ProcOutput: &ProcOutputRequest{ID: "x", Offset: -1}},
		{Op: OpProcSignal, ProcSignal: &ProcSignalRequest{ID: "x", Signal: 65}},
		{Op: OpProcStdin},
		{Op: OpProcForget, Proc: &ProcRef{ID: string(make([]byte, 65))}},
		{Op: OpProcResize},
		{Op: OpProcResize, ProcResize: &ProcResizeRequest{ID: "x", Tty: TtySize{Rows: 0, Cols: 80}}},
		{Op: OpProcResize, ProcResize: &ProcResizeRequest{ID: "x/y", Tty: TtySize{Rows: 24, Cols: 80}}},
	}
	for _, r := range bad {
		if err := r.Validate(); codeOf(err) != CodeInvalid {
			t.Errorf("%s %+v: got %v, want CodeInvalid", r.Op, r, err)
		}
	}
}

func codeOf(err error) ErrorCode {
	if e, ok := err.(*Error); ok {
		return e.Code
	}
	return ""
}
