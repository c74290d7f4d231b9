package clusterproxy_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

const (
	idA = "aaaaaaaaaaa1" // lives on node a
	idB = "bbbbbbbbbbb1" // lives on node b, named "onb"
	idC = "ccccccccccc1" // lives on node c
)

// twoNodes starts nodes a and b; b owns idB (tenant acme).
func twoNodes(t testing.TB) (f *fakeCluster, a, b *node) {
	t.Helper()
	f = newFakeCluster()
	a = startNode(t, f, "a", "")
	b = startNode(t, f, "b", "")
	f.place(idA, "ona", "a", "")
	f.place(idB, "onb", "b", "")
	return f, a, b
}

// TestExecStreamsThroughTheOwner: an exec of a sandbox on b, asked of a,
// runs on b, and its output reaches the client while the command still
// runs (FlushInterval -1: nothing waits in a buffer).
func TestExecStreamsThroughTheOwner(t *testing.T) {
	_, a, b := twoNodes(t)
	first := make(chan struct{})
	b.backend.ExecFn = func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
		started("e9", 99)
		io.WriteString(stdout, "first\n")
		select {
		case <-first: // the client has it: the stream is not buffered
		case <-time.After(10 * time.Second):
			io.WriteString(stderr, "the first line was held back\n")
			return api.ExitStatus{ExitCode: 1}, nil
		}
		io.WriteString(stdout, "second\n")
		io.WriteString(stderr, "err\n")
		return api.ExitStatus{ExitCode: 3, DurationMs: 7}, nil
	}
	var stdout, stderr bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) {
		stdout.Write(p)
		if strings.Contains(stdout.String(), "first\n") {
			select {
			case <-first:
			default:
				close(first)
			}
		}
		return len(p), nil
	})
	exit, err := a.client(t).Exec(context.Background(), "onb", api.ExecRequest{Cmd: []string{"true"}}, w, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 3 || stdout.String() != "first\nsecond\n" || stderr.String() != "err\n" {
		t.Errorf("exit %+v stdout %q stderr %q, want 3, \"first\\nsecond\\n\", \"err\\n\"", exit, stdout.String(), stderr.String())
	}
	if got := b.backend.Calls(); !slices.Equal(got, []string{"Exec onb"}) {
		t.Errorf("b's calls = %v, want [Exec onb]", got)
	}
	if got := a.backend.Calls(); len(got) != 0 {
		t.Errorf("a's calls = %v, want none", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestFilesByteExactThroughTheOwner: a 20 MiB download and upload of a
// sandbox on b, through a, arrive byte for byte.
func TestFilesByteExactThroughTheOwner(t *testing.T) {
	_, a, b := twoNodes(t)
	data := make([]byte, 20<<20)
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	rng.Read(data)
	b.backend.DownloadFn = func(ctx context.Context, ref, path string, open func(api.FileInfo) io.Writer) error {
		w := open(backendtest.File(path, int64(len(data))))
		for off := 0; off < len(data); off += 64 << 10 {
			if _, err := w.Write(data[off : off+64<<10]); err != nil {
				return err
			}
		}
		return nil
	}
	var got bytes.Buffer
	fi, err := a.client(t).Download(context.Background(), idB, "/data/big.bin", &got)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != int64(len(data)) || sha256.Sum256(got.Bytes()) != sha256.Sum256(data) {
		t.Errorf("download: %d bytes (info %d), want %d byte-exact", got.Len(), fi.Size, len(data))
	}

	var uploaded []byte
	b.backend.UploadFn = func(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
		var err error
		uploaded, err = io.ReadAll(r)
		return backendtest.File(req.Path, int64(len(uploaded))), err
	}
	if _, err := a.client(t).Upload(context.Background(), idB, "/data/up.bin", bytes.NewReader(data), 0o644, false); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(uploaded, data) {
		t.Errorf("upload: b got %d bytes, want the %d sent byte-exact", len(uploaded), len(data))
	}
}

// TestWebSocketExecThroughTheOwner: the interactive exec's WebSocket
// upgrade passes through a to b (the default fake echoes stdin).
func TestWebSocketExecThroughTheOwner(t *testing.T) {
	_, a, b := twoNodes(t)
	var out bytes.Buffer
	exit, err := a.client(t).ExecInteractive(context.Background(), "onb", api.ExecRequest{Cmd: []string{"cat"}}, strings.NewReader("hello over two nodes\n"), &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 0 || out.String() != "hello over two nodes\n" {
		t.Errorf("exit %+v, stdout %q", exit, out.String())
	}
	if got := b.backend.Calls(); !slices.Equal(got, []string{"GetSandbox onb", "ExecInteractive onb"}) {
		t.Errorf("b's calls = %v", got)
	}
	if got := a.backend.Calls(); len(got) != 0 {
		t.Errorf("a's calls = %v, want none", got)
	}
}

// TestIdentityHeaders: b trusts the caller and tenant headers only with
// the cluster token; from anyone else they are stripped. Through a, b
// sees the original caller and tenant.
func TestIdentityHeaders(t *testing.T) {
	f := newFakeCluster()
	a := startNode(t, f, "a", "acme") // every client of a is tenant acme
	b := startNode(t, f, "b", "")
	f.place(idB, "onb", "b", "acme")
	var seen callers
	b.backend.GetSandboxFn = func(ctx context.Context, ref string) (api.Sandbox, error) {
		seen.record(ctx)
		return backendtest.Sandbox(idB), nil
	}
	get := func(base, token string, h map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/v1/sandboxes/"+idB, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	forged := map[string]string{"X-Agentbox-Caller": "uid:0", "X-Agentbox-Tenant": "other"}
	// 1. A client forging the headers at b: stripped.
	if st := get(b.url, clientToken, forged); st != 200 {
		t.Fatalf("direct: %d", st)
	}
	// 2. The same headers with the cluster token: trusted.
	if st := get(b.url, clusterToken, forged); st != 200 {
		t.Fatalf("cluster token: %d", st)
	}
	// 3. Through a: the caller "token" of tenant acme reaches b as such.
	if st := get(a.url, clientToken, forged); st != 200 {
		t.Fatalf("through a: %d", st)
	}
	want := []string{"token/", "uid:0/other", "token/acme"}
	if got := seen.list(); !slices.Equal(got, want) {
		t.Errorf("b's backend saw callers %v, want %v", got, want)
	}
	// 4. A tenant b does not know, vouched for with the cluster token:
	// refused as the tenant hook says.
	if st := get(b.url, clusterToken, map[string]string{"X-Agentbox-Tenant": "mallory"}); st != http.StatusForbidden {
		t.Errorf("unknown tenant: %d, want 403", st)
	}
	// 5. A wrong bearer token with the headers: 401, as before.
	if st := get(b.url, "wrong-token-0123456789abcdef", forged); st != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", st)
	}
}

// TestOtherTenantsSandboxIsNotForwarded: a caller of tenant other asking
// a for acme's sandbox on b gets a's local answer (404), and b is never
// asked.
func TestOtherTenantsSandboxIsNotForwarded(t *testing.T) {
	f := newFakeCluster()
	a := startNode(t, f, "a", "other")
	b := startNode(t, f, "b", "")
	f.place(idB, "onb", "b", "acme")
	a.backend.GetSandboxFn = func(ctx context.Context, ref string) (api.Sandbox, error) {
		return api.Sandbox{}, errdefs.ErrNotFound
	}
	_, err := a.client(t).GetSandbox(context.Background(), "onb")
	if !api.HasCode(err, api.CodeNotFound) {
		t.Errorf("err = %v, want 404 not_found", err)
	}
	if got := b.backend.Calls(); len(got) != 0 {
		t.Errorf("b was asked: %v", got)
	}
}

// TestLoopGuard: a request that carries the forwarded-by header with the
// cluster token is served where it arrives, even if the directory says
// the sandbox is elsewhere; without the cluster token the header is
// stripped and the request routed as any.
func TestLoopGuard(t *testing.T) {
	_, a, b := twoNodes(t)
	a.backend.GetSandboxFn = func(ctx context.Context, ref string) (api.Sandbox, error) {
		return api.Sandbox{}, errdefs.ErrNotFound
	}
	get := func(token string) int {
		req, _ := http.NewRequest("GET", a.url+"/v1/sandboxes/"+idB, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Agentbox-Forwarded-By", "b")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get(clusterToken); st != http.StatusNotFound {
		t.Errorf("forwarded once: %d, want a's own 404", st)
	}
	if got := b.backend.Calls(); len(got) != 0 {
		t.Errorf("a forwarded a forwarded request to b: %v", got)
	}
	if got := a.backend.Calls(); !slices.Equal(got, []string{"GetSandbox " + idB}) {
		t.Errorf("a's calls = %v", got)
	}
	if st := get(clientToken); st != http.StatusOK {
		t.Errorf("forged guard from a client: %d, want 200 from b", st)
	}
	if got := b.backend.Calls(); !slices.Equal(got, []string{"GetSandbox " + idB}) {
		t.Errorf("b's calls = %v", got)
	}
}

// TestUnknownToTheDirectoryIsLocal: a sandbox the directory does not
// know is looked up here (single host semantics), and so is every
// sandbox while the directory cannot be read.
func TestUnknownToTheDirectoryIsLocal(t *testing.T) {
	f, a, b := twoNodes(t)
	if _, err := a.client(t).GetSandbox(context.Background(), "local-only"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.dirErr = errdefs.ErrUnavailable
	f.mu.Unlock()
	if _, err := a.client(t).GetSandbox(context.Background(), idB); err != nil {
		t.Fatal(err)
	}
	if got := a.backend.Calls(); !slices.Equal(got, []string{"GetSandbox local-only", "GetSandbox " + idB}) {
		t.Errorf("a's calls = %v", got)
	}
	if got := b.backend.Calls(); len(got) != 0 {
		t.Errorf("b's calls = %v", got)
	}
}

// TestLocalSkipsTheDirectory: a request for a sandbox of this node (by ID
// or name) is served here without a directory lookup; one for another
// node's asks the directory once and is forwarded.
func TestLocalSkipsTheDirectory(t *testing.T) {
	f, a, b := twoNodes(t)
	c := a.client(t)
	for _, ref := range []string{idA, "ona"} {
		if _, err := c.GetSandbox(context.Background(), ref); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	n := f.lookups
	f.mu.Unlock()
	if n != 0 {
		t.Errorf("%d directory lookups for a's own sandbox, want 0", n)
	}
	if _, err := c.GetSandbox(context.Background(), "onb"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	n = f.lookups
	f.mu.Unlock()
	if n != 1 {
		t.Errorf("%d directory lookups for b's sandbox, want 1", n)
	}
	if got := a.backend.Calls(); !slices.Equal(got, []string{"GetSandbox " + idA, "GetSandbox ona"}) {
		t.Errorf("a's calls = %v", got)
	}
	if got := b.backend.Calls(); !slices.Equal(got, []string{"GetSandbox onb"}) {
		t.Errorf("b's calls = %v", got)
	}
}

// TestUnreachableOwner: a sandbox whose node stopped heartbeating, left
// the membership, or refuses connections is answered 503
// node_unreachable, naming the node, at once.
func TestUnreachableOwner(t *testing.T) {
	f, a, _ := twoNodes(t)
	f.place(idC, "onc", "c", "")
	c := a.client(t)

	f.setNode(cluster.NodeInfo{Name: "c", Advertise: "http://127.0.0.1:9", State: cluster.NodeUnreachable, LastSeen: time.Now().Add(-17 * time.Second)})
	start := time.Now()
	_, err := c.Exec(context.Background(), "onc", api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
	t.Logf("unreachable (no heartbeat): answered in %v", time.Since(start))
	want := "sandbox onc is on node c, which has not been seen for 17 s"
	if !api.HasCode(err, api.CodeNodeUnreachable) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %v, want node_unreachable %q", err, want)
	}
	var ae *api.Error
	if errorsAs(err, &ae) && (ae.Status != 503 || ae.Details["node"] != "c") {
		t.Errorf("status %d details %v, want 503 node c", ae.Status, ae.Details)
	}

	// Heartbeating, but nothing listens at its address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	f.setNode(cluster.NodeInfo{Name: "c", Advertise: dead, State: cluster.NodeUp, LastSeen: time.Now()})
	start = time.Now()
	_, err = c.GetSandbox(context.Background(), idC)
	t.Logf("unreachable (connection refused): answered in %v", time.Since(start))
	if !api.HasCode(err, api.CodeNodeUnreachable) || !strings.Contains(err.Error(), "which does not answer at "+dead) {
		t.Errorf("err = %v, want node_unreachable, does not answer", err)
	}

	// Gone from the membership.
	f.mu.Lock()
	delete(f.nodes, "c")
	f.mu.Unlock()
	_, err = c.GetSandbox(context.Background(), idC)
	if !api.HasCode(err, api.CodeNodeUnreachable) || !strings.Contains(err.Error(), "is no member of the cluster") {
		t.Errorf("err = %v, want node_unreachable, no member", err)
	}
}

// TestListAcrossNodes: a's list holds its own sandboxes, b's (asked with
// the caller's identity, never fanned out again by b) and c's from the
// directory as unknown, oldest first; a label filter leaves c's out.
func TestListAcrossNodes(t *testing.T) {
	f, a, b := twoNodes(t)
	f.place(idC, "onc", "c", "")
	f.place("ccccccccccc2", "", "c", "other") // another tenant's: still listed without tenants
	f.setNode(cluster.NodeInfo{Name: "c", Advertise: "http://127.0.0.1:9", State: cluster.NodeUnreachable, LastSeen: time.Now().Add(-30 * time.Second)})
	at := func(id, node string, sec int) api.Sandbox {
		sb := backendtest.Sandbox(id)
		sb.Node = node
		sb.CreatedAt = backendtest.Epoch.Add(time.Duration(sec) * time.Second)
		return sb
	}
	a.backend.ListSandboxesFn = func(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
		return []api.Sandbox{at(idA, "a", 1)}, nil
	}
	var seen callers
	b.backend.ListSandboxesFn = func(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
		seen.record(ctx)
		b1, b2 := at(idB, "", 0), at("bbbbbbbbbbb2", "", 2) // Node filled in by a
		if labels["team"] == "x" {
			return []api.Sandbox{b2}, nil
		}
		return []api.Sandbox{b1, b2}, nil
	}
	list, err := a.client(t).ListSandboxes(context.Background(), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sb := range list {
		got = append(got, sb.ID+"@"+sb.Node+":"+sb.State+":"+sb.Reason)
	}
	want := []string{
		idB + "@b:running:", idA + "@a:running:", "bbbbbbbbbbb2@b:running:",
		idC + "@c:unknown:node_unreachable", "ccccccccccc2@c:unknown:node_unreachable",
	}
	if !slices.Equal(got, want) {
		t.Errorf("list =\n%v\nwant\n%v", got, want)
	}
	if got := seen.list(); !slices.Equal(got, []string{"token/"}) {
		t.Errorf("b listed for %v, want [token/]", got)
	}
	if got := a.backend.Calls(); !slices.Equal(got, []string{"ListSandboxes "}) {
		t.Errorf("a's calls = %v: b fanned the list out again", got)
	}

	list, err = a.client(t).ListSandboxes(context.Background(), map[string]string{"team": "x"}, "")
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, sb := range list {
		got = append(got, sb.ID)
	}
	if want := []string{idA, "bbbbbbbbbbb2"}; !slices.Equal(got, want) {
		t.Errorf("filtered list = %v, want %v", got, want)
	}
}

// TestListOfATenant: a tenant's list holds only its unknown entries.
func TestListOfATenant(t *testing.T) {
	f := newFakeCluster()
	a := startNode(t, f, "a", "acme")
	a.backend.ListSandboxesFn = func(context.Context, map[string]string, string) ([]api.Sandbox, error) { return nil, nil }
	f.place(idC, "onc", "c", "acme")
	f.place("ccccccccccc2", "", "c", "other")
	f.setNode(cluster.NodeInfo{Name: "c", State: cluster.NodeUnreachable, LastSeen: time.Now()})
	list, err := a.client(t).ListSandboxes(context.Background(), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != idC {
		t.Errorf("list = %+v, want only %s", list, idC)
	}
}
