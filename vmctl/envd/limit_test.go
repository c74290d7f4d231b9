package envd_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process/processconnect"
)

// TestMessageLimit: a request message over the data plane's limit
// (16 MiB), also one that gzip makes small on the wire, is refused with
// resource_exhausted before it reaches the service; one at the limit
// passes.
func TestMessageLimit(t *testing.T) {
	var mu sync.Mutex
	var wrote []int64
	b := &backendtest.Fake{WriteStdinFn: func(ctx context.Context, ref, pid string, r io.Reader, closeAfter bool) (int64, error) {
		n, err := io.Copy(io.Discard, r)
		mu.Lock()
		wrote = append(wrote, n)
		mu.Unlock()
		return n, err
	}}
	url := fakeData(t, b)
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 42}}
	input := func(n int) *connect.Request[process.SendInputRequest] {
		return connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{
			Input: &process.ProcessInput_Stdin{Stdin: make([]byte, n)}}})
	}
	for _, c := range codecs {
		plain := processconnect.NewProcessClient(http.DefaultClient, url, c.opts...)
		gz := processconnect.NewProcessClient(http.DefaultClient, url, append(slices.Clone(c.opts), connect.WithSendGzip())...)
		_, err := plain.SendInput(t.Context(), input(16<<20+1))
		wantCode(t, c.name+": 16 MiB + 1", err, connect.CodeResourceExhausted, "")
		_, err = gz.SendInput(t.Context(), input(64<<20))
		wantCode(t, c.name+": 64 MiB of zeros gzipped", err, connect.CodeResourceExhausted, "")
	}
	if len(wrote) != 0 {
		t.Errorf("the service got stdin of %v bytes", wrote)
	}
	if _, err := processconnect.NewProcessClient(http.DefaultClient, url, connect.WithSendGzip()).SendInput(t.Context(), input(16<<20-64)); err != nil {
		t.Errorf("16 MiB - 64: %v", err)
	}
	if len(wrote) != 1 || wrote[0] != 16<<20-64 {
		t.Errorf("the service got stdin of %v bytes, want [%d]", wrote, 16<<20-64)
	}
}
