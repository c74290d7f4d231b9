package envd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/envd"
	fspb "github.com/agentbox/agentbox/vmctl/envd/gen/filesystem"
	"github.com/agentbox/agentbox/vmctl/envd/gen/filesystem/filesystemconnect"
	"github.com/agentbox/agentbox/vmctl/host"
)

// guest is a real daemon (the in-process service) with one TCG sandbox,
// and the data plane for it on an HTTP server.
type guest struct {
	c   *client.Client
	sb  string
	url string
}

func startGuest(t *testing.T) *guest {
	t.Helper()
	image := testenv.Image(t)
	ctx := context.Background()
	dir := testenv.ShortTempDir(t)
	svc, err := host.Start(ctx, host.Options{URI: testenv.URI(), StateDir: dir + "/s", RuntimeDir: dir + "/r", Local: &host.LocalOptions{RunID: "e2bf5e2bf5e2bf50"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(context.Background()); err != nil {
			t.Errorf("closing the service: %v", err)
		}
	})
	sb, err := svc.Client.CreateSandbox(ctx, api.CreateSandboxRequest{Image: image, Accel: "tcg"})
	if err != nil {
		t.Fatal(err)
	}
	h := envd.NewHandler(svc.Client, envd.Options{DefaultUser: "root"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(envd.WithSandbox(r.Context(), sb.ID)))
	}))
	t.Cleanup(srv.Close)
	return &guest{c: svc.Client, sb: sb.ID, url: srv.URL}
}

// digestReader yields n pseudo-random bytes without holding them, and
// their SHA-256 once read.
type digestReader struct {
	n   int64
	sum func() []byte
	r   io.Reader
}

func newDigestReader(n int64) *digestReader {
	h := sha256.New()
	d := &digestReader{n: n, r: io.TeeReader(io.LimitReader(rand.Reader, n), h)}
	d.sum = func() []byte { return h.Sum(nil) }
	return d
}

func (d *digestReader) Read(p []byte) (int, error) { return d.r.Read(p) }

func (g *guest) get(t *testing.T, p, user string) (*http.Response, []byte) {
	t.Helper()
	q := url.Values{"path": {p}}
	if user != "" {
		q.Set("username", user)
	}
	resp, err := http.Get(g.url + "/files?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

type writeInfo struct{ Name, Type, Path string }

func (g *guest) post(t *testing.T, query url.Values, contentType string, body io.Reader) (int, []writeInfo, string) {
	t.Helper()
	resp, err := http.Post(g.url+"/files?"+query.Encode(), contentType, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []writeInfo
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("upload answer %s: %v", b, err)
		}
	}
	return resp.StatusCode, out, string(b)
}

// TestFilesAndFilesystem drives /files, /health and filesystem.Filesystem
// (JSON and binary codecs) against a TCG guest.
func TestFilesAndFilesystem(t *testing.T) {
	g := startGuest(t)
	ctx := context.Background()

	resp, err := http.Get(g.url + "/health")
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("/health: %v %v", resp, err)
	}
	resp.Body.Close()

	// 20 MiB octet-stream upload, streamed; the download is byte-exact.
	const big = 20 << 20
	src := newDigestReader(big)
	status, out, body := g.post(t, url.Values{"path": {"/root/up/big.bin"}}, "application/octet-stream", src)
	if status != 200 || !slices.Equal(out, []writeInfo{{"big.bin", "file", "/root/up/big.bin"}}) {
		t.Fatalf("octet upload: %d %s", status, body)
	}
	dl, err := http.Get(g.url + "/files?path=" + url.QueryEscape("/root/up/big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, dl.Body)
	dl.Body.Close()
	if err != nil || n != big || dl.StatusCode != 200 || dl.Header.Get("Content-Type") != "application/octet-stream" || !bytes.Equal(h.Sum(nil), src.sum()) {
		t.Fatalf("download: %d bytes, status %d, %v, digest equal %v", n, dl.StatusCode, err, bytes.Equal(h.Sum(nil), src.sum()))
	}

	// Multipart, several files, no path: each part's filename is its
	// destination, relative ones in the user's home.
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	for _, f := range [][2]string{{"/tmp/m/a.txt", "alpha"}, {"rel/b.bin", "\x00\x01\xff"}} {
		w, _ := mw.CreateFormFile("file", f[0])
		io.WriteString(w, f[1])
	}
	mw.Close()
	status, out, body = g.post(t, url.Values{}, mw.FormDataContentType(), &mp)
	if status != 200 || !slices.Equal(out, []writeInfo{{"a.txt", "file", "/tmp/m/a.txt"}, {"b.bin", "file", "/root/rel/b.bin"}}) {
		t.Fatalf("multipart upload: %d %s", status, body)
	}
	if _, b := g.get(t, "/tmp/m/a.txt", ""); string(b) != "alpha" {
		t.Fatalf("a.txt = %q", b)
	}
	if _, b := g.get(t, "rel/b.bin", "root"); string(b) != "\x00\x01\xff" {
		t.Fatalf("b.bin = %q", b)
	}
	// Multipart with a path parameter, written for another user: owned by it.
	mp.Reset()
	mw = multipart.NewWriter(&mp)
	w, _ := mw.CreateFormFile("file", "ignored.txt")
	io.WriteString(w, "owned")
	mw.Close()
	status, out, body = g.post(t, url.Values{"path": {"/tmp/own/n.txt"}, "username": {"nobody"}}, mw.FormDataContentType(), &mp)
	if status != 200 || !slices.Equal(out, []writeInfo{{"n.txt", "file", "/tmp/own/n.txt"}}) {
		t.Fatalf("multipart upload with path: %d %s", status, body)
	}

	// Missing file: 404 in envd's shape; a directory: 400.
	r404, b := g.get(t, "/tmp/nope", "")
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if r404.StatusCode != 404 || json.Unmarshal(b, &e) != nil || e.Code != 404 || !strings.Contains(e.Message, "/tmp/nope") {
		t.Fatalf("missing file: %d %s", r404.StatusCode, b)
	}
	if r, b := g.get(t, "/tmp", ""); r.StatusCode != 400 {
		t.Fatalf("directory download: %d %s", r.StatusCode, b)
	}
	if status, _, body := g.post(t, url.Values{}, "text/plain", strings.NewReader("x")); status != 400 || !strings.Contains(body, "unsupported content type") {
		t.Fatalf("text/plain upload: %d %s", status, body)
	}

	for _, codec := range []struct {
		name string
		opts []connect.ClientOption
	}{{"json", []connect.ClientOption{connect.WithProtoJSON()}}, {"proto", nil}} {
		t.Run(codec.name, func(t *testing.T) {
			fs := filesystemconnect.NewFilesystemClient(http.DefaultClient, g.url, codec.opts...)
			base := "/root/fs-" + codec.name // ext4: a directory's size is 4096
			testFilesystem(ctx, t, g, fs, base)
		})
	}
}

func codeOf(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return 0
}

func asUser(req interface{ Header() http.Header }, user string) {
	req.Header().Set("Authorization", "Basic "+b64(user+":"))
}

func testFilesystem(ctx context.Context, t *testing.T, g *guest, fs filesystemconnect.FilesystemClient, base string) {
	// Stat of a file written for nobody.
	st, err := fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/tmp/own/n.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	e := st.Msg.GetEntry()
	if e.GetName() != "n.txt" || e.GetType() != fspb.FileType_FILE_TYPE_FILE || e.GetPath() != "/tmp/own/n.txt" || e.GetSize() != 5 ||
		e.GetMode() != 0o644 || e.GetPermissions() != "-rw-r--r--" || e.GetOwner() != "nobody" || e.GetGroup() != "nogroup" ||
		e.GetModifiedTime().AsTime().Before(time.Now().Add(-time.Hour)) || e.SymlinkTarget != nil {
		t.Fatalf("Stat = %v", e)
	}
	// MakeDir: made with parents, then already_exists (the SDK's false);
	// a file in the way is invalid_argument.
	req := connect.NewRequest(&fspb.MakeDirRequest{Path: base + "/d/sub"})
	mk, err := fs.MakeDir(ctx, req)
	if err != nil || mk.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_DIRECTORY || mk.Msg.GetEntry().GetPath() != base+"/d/sub" {
		t.Fatalf("MakeDir: %v %v", mk, err)
	}
	if _, err := fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: base + "/d/sub"})); codeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("MakeDir twice: %v", err)
	}
	if _, err := fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/tmp/m/a.txt"})); codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("MakeDir over a file: %v", err)
	}
	// A directory made for nobody (Basic auth) belongs to it.
	req = connect.NewRequest(&fspb.MakeDirRequest{Path: base + "/nb"})
	asUser(req, "nobody")
	if _, err := fs.MakeDir(ctx, req); err != nil {
		t.Fatal(err)
	}
	if st, err := fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: base + "/nb"})); err != nil || st.Msg.GetEntry().GetOwner() != "nobody" || st.Msg.GetEntry().GetPermissions() != "drwxr-xr-x" {
		t.Fatalf("Stat(nb) = %v %v", st, err)
	}
	if _, err := g.c.Upload(ctx, g.sb, base+"/d/f1", strings.NewReader("1"), 0o600, false); err != nil {
		t.Fatal(err)
	}
	if _, err := g.c.Upload(ctx, g.sb, base+"/d/sub/f2", strings.NewReader("22"), 0o644, false); err != nil {
		t.Fatal(err)
	}
	list := func(depth uint32) []string {
		t.Helper()
		l, err := fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: base + "/d", Depth: depth}))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range l.Msg.GetEntries() {
			got = append(got, fmt.Sprintf("%s %s %d %s", e.GetPath(), e.GetType(), e.GetSize(), e.GetPermissions()))
		}
		return got
	}
	if got, want := list(1), []string{base + "/d/f1 FILE_TYPE_FILE 1 -rw-------", base + "/d/sub FILE_TYPE_DIRECTORY 4096 drwxr-xr-x"}; !slices.Equal(got, want) {
		t.Fatalf("ListDir depth 1 = %q, want %q", got, want)
	}
	if got, want := list(2), []string{base + "/d/f1 FILE_TYPE_FILE 1 -rw-------", base + "/d/sub FILE_TYPE_DIRECTORY 4096 drwxr-xr-x", base + "/d/sub/f2 FILE_TYPE_FILE 2 -rw-r--r--"}; !slices.Equal(got, want) {
		t.Fatalf("ListDir depth 2 = %q, want %q", got, want)
	}
	if _, err := fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: base + "/nope"})); codeOf(err) != connect.CodeNotFound {
		t.Fatalf("ListDir missing: %v", err)
	}
	if _, err := fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: base + "/d/f1"})); codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("ListDir of a file: %v", err)
	}
	// Move into a new directory; the source is gone.
	mv, err := fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: base + "/d/f1", Destination: base + "/moved/g1"}))
	if err != nil || mv.Msg.GetEntry().GetPath() != base+"/moved/g1" || mv.Msg.GetEntry().GetSize() != 1 || mv.Msg.GetEntry().GetName() != "g1" {
		t.Fatalf("Move = %v, %v", mv, err)
	}
	if _, err := fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: base + "/d/f1"})); codeOf(err) != connect.CodeNotFound {
		t.Fatalf("Stat of the moved source: %v", err)
	}
	if _, err := fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: base + "/d/f1", Destination: base + "/x"})); codeOf(err) != connect.CodeNotFound {
		t.Fatalf("Move of a missing source: %v", err)
	}
	// Remove: a directory with its content; a missing path is no error
	// (envd's RemoveAll).
	for i := 0; i < 2; i++ {
		if _, err := fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: base + "/d"})); err != nil {
			t.Fatalf("Remove #%d: %v", i, err)
		}
	}
	if _, err := fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: base + "/d"})); codeOf(err) != connect.CodeNotFound {
		t.Fatalf("Stat after Remove: %v", err)
	}
	// WatchDir: start, then create, write, rename, remove in order.
	if _, err := fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: base + "/w"})); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	wreq := connect.NewRequest(&fspb.WatchDirRequest{Path: base + "/w", IncludeEntry: true})
	wreq.Header().Set("Keepalive-Ping-Interval", "1")
	stream, err := fs.WatchDir(wctx, wreq)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("first event %v, %v", stream.Msg(), stream.Err())
	}
	script := "cd " + base + "/w && echo a > f && echo b >> f && mv f g && rm g"
	if st, err := g.c.Exec(ctx, g.sb, api.ExecRequest{Cmd: []string{"sh", "-c", script}}, io.Discard, io.Discard); err != nil || st.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", st, err)
	}
	var got []string
	keepalives := 0
	var gEntry *fspb.EntryInfo
	want := []string{"CREATE f", "WRITE f", "RENAME f", "CREATE g", "REMOVE g"}
	for len(got) < len(want) && stream.Receive() {
		if stream.Msg().GetKeepalive() != nil {
			keepalives++
			continue
		}
		ev := stream.Msg().GetFilesystem()
		s := strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_") + " " + ev.GetName()
		if len(got) > 0 && got[len(got)-1] == s && s == "WRITE f" {
			continue // the kernel may or may not merge the two writes
		}
		if s == "CREATE g" {
			gEntry = ev.GetEntry()
		}
		got = append(got, s)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q (stream error %v)", got, want, stream.Err())
	}
	if gEntry == nil || gEntry.GetPath() != base+"/w/g" || gEntry.GetSize() != 4 || gEntry.GetType() != fspb.FileType_FILE_TYPE_FILE {
		t.Fatalf("entry of CREATE g: %v", gEntry)
	}
	// Keepalives come while idle (interval 1 s).
	for keepalives == 0 && stream.Receive() {
		if stream.Msg().GetKeepalive() != nil {
			keepalives++
		}
	}
	if keepalives == 0 {
		t.Fatalf("no keepalive: %v", stream.Err())
	}
	if _, err := fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: base})); codeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("CreateWatcher: %v", err)
	}
}
