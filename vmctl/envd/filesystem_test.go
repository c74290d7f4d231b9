package envd

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/vmctl/api"
	fspb "github.com/agentbox/agentbox/vmctl/envd/gen/filesystem"
)

func TestEntryInfo(t *testing.T) {
	mt := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, c := range []struct {
		in          api.FileInfo
		typ         fspb.FileType
		mode        uint32
		permissions string
		target      string
	}{
		{api.FileInfo{Name: "f", Path: "/f", Type: api.FileRegular, Size: 3, Mode: "0640", ModTime: mt, Owner: "user", Group: "user"}, fspb.FileType_FILE_TYPE_FILE, 0o640, "-rw-r-----", ""},
		{api.FileInfo{Name: "d", Path: "/d", Type: api.FileDir, Mode: "0755"}, fspb.FileType_FILE_TYPE_DIRECTORY, 0o755, "drwxr-xr-x", ""},
		{api.FileInfo{Name: "l", Path: "/l", Type: api.FileSymlink, Mode: "0777", LinkTarget: "/f"}, fspb.FileType_FILE_TYPE_SYMLINK, 0o777, "Lrwxrwxrwx", "/f"},
		// A followed link (stat): the target's type and mode, the link's
		// own permission string, its target named.
		{api.FileInfo{Name: "l", Path: "/l", Type: api.FileRegular, Mode: "0644", LinkTarget: "/f"}, fspb.FileType_FILE_TYPE_FILE, 0o644, "Lrwxrwxrwx", "/f"},
		{api.FileInfo{Name: "s", Path: "/s", Type: api.FileRegular, Mode: "4755"}, fspb.FileType_FILE_TYPE_FILE, 0o755, "urwxr-xr-x", ""},
		{api.FileInfo{Name: "p", Path: "/p", Type: api.FileOther, Mode: "0600"}, fspb.FileType_FILE_TYPE_UNSPECIFIED, 0o600, "-rw-------", ""},
	} {
		e := entryInfo(c.in)
		if e.GetName() != c.in.Name || e.GetPath() != c.in.Path || e.GetType() != c.typ || e.GetMode() != c.mode || e.GetPermissions() != c.permissions ||
			e.GetSymlinkTarget() != c.target || (e.SymlinkTarget != nil) != (c.target != "") || e.GetOwner() != c.in.Owner || e.GetGroup() != c.in.Group {
			t.Errorf("entryInfo(%+v) = %v", c.in, e)
		}
		if c.in.ModTime.IsZero() != (e.ModifiedTime == nil) || (e.ModifiedTime != nil && !e.ModifiedTime.AsTime().Equal(mt)) {
			t.Errorf("entryInfo(%+v).ModifiedTime = %v", c.in, e.ModifiedTime)
		}
	}
}

func TestWatchEvents(t *testing.T) {
	info := &api.FileInfo{Name: "b", Path: "/w/b", Type: api.FileRegular, Size: 2, Mode: "0644"}
	type ev = struct {
		t    fspb.EventType
		name string
		ent  bool
	}
	for _, c := range []struct {
		in   api.WatchEvent
		want []ev
	}{
		{api.WatchEvent{Op: api.WatchCreate, Path: "/w/a", Info: info}, []ev{{fspb.EventType_EVENT_TYPE_CREATE, "a", true}}},
		{api.WatchEvent{Op: api.WatchWrite, Path: "/w/sub/a", Info: info}, []ev{{fspb.EventType_EVENT_TYPE_WRITE, "sub/a", true}}},
		{api.WatchEvent{Op: api.WatchRemove, Path: "/w/a"}, []ev{{fspb.EventType_EVENT_TYPE_REMOVE, "a", false}}},
		{api.WatchEvent{Op: api.WatchChmod, Path: "/w/a", Info: info}, []ev{{fspb.EventType_EVENT_TYPE_CHMOD, "a", true}}},
		{api.WatchEvent{Op: api.WatchRename, Path: "/w/a", To: "/w/b", Info: info}, []ev{{fspb.EventType_EVENT_TYPE_RENAME, "a", false}, {fspb.EventType_EVENT_TYPE_CREATE, "b", true}}},
		{api.WatchEvent{Op: api.WatchRename, Path: "/w/a"}, []ev{{fspb.EventType_EVENT_TYPE_RENAME, "a", false}}},
		{api.WatchEvent{Op: api.WatchRemove, Path: "/w"}, []ev{{fspb.EventType_EVENT_TYPE_REMOVE, ".", false}}},
		{api.WatchEvent{Op: api.WatchOverflow, Path: "/w"}, nil},
		// The guest agent's upload temp file: its own events are dropped,
		// its rename onto NAME is CREATE and WRITE of NAME (what envd's
		// watcher sees of a plain write).
		{api.WatchEvent{Op: api.WatchCreate, Path: "/w/.b.agentbox-824410569", Info: info}, nil},
		{api.WatchEvent{Op: api.WatchWrite, Path: "/w/sub/.b.agentbox-824410569", Info: info}, nil},
		{api.WatchEvent{Op: api.WatchChmod, Path: "/w/.b.agentbox-824410569", Info: info}, nil},
		{api.WatchEvent{Op: api.WatchRemove, Path: "/w/.b.agentbox-824410569"}, nil},
		{api.WatchEvent{Op: api.WatchRename, Path: "/w/.b.agentbox-824410569"}, nil},
		{api.WatchEvent{Op: api.WatchRename, Path: "/w/.b.agentbox-824410569", To: "/w/b", Info: info}, []ev{{fspb.EventType_EVENT_TYPE_CREATE, "b", true}, {fspb.EventType_EVENT_TYPE_WRITE, "b", true}}},
		{api.WatchEvent{Op: api.WatchRename, Path: "/w/sub/.b.agentbox-1", To: "/w/sub/b", Info: info}, []ev{{fspb.EventType_EVENT_TYPE_CREATE, "sub/b", true}, {fspb.EventType_EVENT_TYPE_WRITE, "sub/b", true}}},
		// Names that only look like it are reported as they are.
		{api.WatchEvent{Op: api.WatchCreate, Path: "/w/.b.agentbox-12x", Info: info}, []ev{{fspb.EventType_EVENT_TYPE_CREATE, ".b.agentbox-12x", true}}},
		{api.WatchEvent{Op: api.WatchCreate, Path: "/w/b.agentbox-12", Info: info}, []ev{{fspb.EventType_EVENT_TYPE_CREATE, "b.agentbox-12", true}}},
		// A temp name renamed onto another name than its own: the temp
		// name was never shown, so only CREATE of the new one.
		{api.WatchEvent{Op: api.WatchRename, Path: "/w/.b.agentbox-1", To: "/w/c", Info: info}, []ev{{fspb.EventType_EVENT_TYPE_CREATE, "c", true}}},
	} {
		got := watchEvents("/w", c.in, true)
		if len(got) != len(c.want) {
			t.Fatalf("watchEvents(%+v) = %v", c.in, got)
		}
		for i, w := range c.want {
			if got[i].GetType() != w.t || got[i].GetName() != w.name || (got[i].Entry != nil) != w.ent {
				t.Errorf("watchEvents(%+v)[%d] = %v, want %v", c.in, i, got[i], w)
			}
			if w.ent && got[i].GetEntry().GetPath() != "/w/"+w.name || w.ent && got[i].GetEntry().GetName() != path.Base(w.name) {
				t.Errorf("entry path %q", got[i].GetEntry().GetPath())
			}
		}
		if noEntry := watchEvents("/w", c.in, false); len(noEntry) > 0 && noEntry[0].Entry != nil {
			t.Errorf("entry without includeEntry: %v", noEntry)
		}
	}
}

func TestRPCUser(t *testing.T) {
	for _, c := range []struct {
		header, want string
		code         connect.Code
	}{
		{"", "user", 0},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("root:")), "root", 0},
		{"basic " + base64.StdEncoding.EncodeToString([]byte("root:")), "root", 0},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte(":")), "user", 0},
		{"Bearer x", "", connect.CodeUnauthenticated},
		{"Basic !!", "", connect.CodeUnauthenticated},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("a b:")), "", connect.CodeUnauthenticated},
	} {
		h := http.Header{}
		if c.header != "" {
			h.Set("Authorization", c.header)
		}
		got, err := rpcUser(h, "user")
		var ce *connect.Error
		if got != c.want || (c.code == 0) != (err == nil) || (err != nil && (!errors.As(err, &ce) || ce.Code() != c.code)) {
			t.Errorf("rpcUser(%q) = %q, %v", c.header, got, err)
		}
	}
}

func TestResolverWithoutGuest(t *testing.T) {
	r := &resolver{user: "user"} // no client: only paths that need no home
	for in, want := range map[string]string{"/a/../b/": "/b", "/": "/"} {
		if got, err := r.abs(context.Background(), in); err != nil || got != want {
			t.Errorf("abs(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "~other/x"} {
		if _, err := r.abs(context.Background(), in); !api.HasCode(err, api.CodeInvalidArgument) {
			t.Errorf("abs(%q): %v", in, err)
		}
	}
	r.home = "/home/user"
	for in, want := range map[string]string{"~": "/home/user", "~/x": "/home/user/x", "a/b": "/home/user/a/b", "../x": "/home/x"} {
		if got, err := r.abs(context.Background(), in); err != nil || got != want {
			t.Errorf("abs(%q) = %q, %v", in, got, err)
		}
	}
}

func TestHTTPErrorShape(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
	}{
		{api.Errorf(404, api.CodeNotFound, "no /x"), 404},
		{api.Errorf(422, api.CodeNotAFile, "/etc is a dir"), 400},
		{api.Errorf(409, api.CodeNotRunning, "stopped"), 502},
		{api.Errorf(400, api.CodeInvalidArgument, "bad"), 400},
		{errors.New("boom"), 500},
	} {
		w := httptest.NewRecorder()
		writeHTTPError(w, c.err)
		var body envdError
		if w.Code != c.status || w.Header().Get("Content-Type") != "application/json" || json.Unmarshal(w.Body.Bytes(), &body) != nil ||
			body != (envdError{Code: c.status, Message: api.ErrorFrom(c.err).Message}) {
			t.Errorf("writeHTTPError(%v) = %d %s", c.err, w.Code, w.Body)
		}
	}
}
