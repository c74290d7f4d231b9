package guestagent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
)

func codeOf(err error) agentproto.ErrorCode {
	var pe *agentproto.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func TestWriteReadFile1MiB(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	data := make([]byte, 1<<20)
	rand.Read(data)
	p := filepath.Join(t.TempDir(), "a", "b", "file.bin")
	if err := c.WriteFile(ctx, p, bytes.NewReader(data), 0o640, agent.WithParents()); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := c.ReadFile(ctx, p, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("read back %d bytes, differ", got.Len())
	}
	onDisk, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if !bytes.Equal(onDisk, data) || fi.Mode() != 0o640 {
		t.Fatalf("on disk: %d bytes, mode %v", len(onDisk), fi.Mode())
	}
	st, err := c.Stat(ctx, p)
	if err != nil || st.Name != "file.bin" || st.Size != 1<<20 || st.Mode != 0o640 || st.Type != agentproto.TypeFile || st.ModTimeNs != fi.ModTime().UnixNano() {
		t.Fatalf("Stat = %+v, %v", st, err)
	}
	// Replace atomically with a smaller file and another mode.
	if err := c.WriteFile(ctx, p, strings.NewReader("short"), 0o755); err != nil {
		t.Fatal(err)
	}
	got.Reset()
	if err := c.ReadFile(ctx, p, &got); err != nil || got.String() != "short" {
		t.Fatalf("after replace: %q %v", got.String(), err)
	}
	if fi, _ := os.Stat(p); fi.Mode() != 0o755 {
		t.Fatalf("mode after replace %v", fi.Mode())
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

func TestWriteFileErrors(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	dir := t.TempDir()
	err := c.WriteFile(ctx, filepath.Join(dir, "missing", "f"), strings.NewReader("x"), 0o644)
	if codeOf(err) != agentproto.CodeNotFound || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing parent: %v", err)
	}
	// The message names the missing directory, not the temporary file the
	// write goes through (the host names the file).
	var pe *agentproto.Error
	if want := "directory " + filepath.Join(dir, "missing") + " does not exist: create it first, or write with parents"; !errors.As(err, &pe) || pe.Message != want {
		t.Fatalf("missing parent: %q, want the message %q", err, want)
	}
	if err := c.WriteFile(ctx, "relative/path", strings.NewReader("x"), 0o644); codeOf(err) != agentproto.CodeInvalid {
		t.Fatalf("relative: %v", err)
	}
	// A failing source: nothing must replace the target.
	target := filepath.Join(dir, "keep")
	os.WriteFile(target, []byte("original"), 0o600)
	boom := errors.New("boom")
	src := io.MultiReader(strings.NewReader("partial"), iotest.ErrReader(boom))
	if err := c.WriteFile(ctx, target, src, 0o644); !errors.Is(err, boom) {
		t.Fatalf("failing source: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "original" {
		t.Fatalf("target changed to %q", b)
	}
	// A large write that fails early (the target is a directory) returns
	// the guest's error without sending everything.
	big := io.LimitReader(zeroReader{}, 64<<20)
	err = c.WriteFile(ctx, dir, big, 0o644)
	if codeOf(err) == "" {
		t.Fatalf("write onto a directory: %v", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestReadFileErrors(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	err := c.ReadFile(ctx, "/nonexistent/file", io.Discard)
	if codeOf(err) != agentproto.CodeNotFound || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	if err := c.ReadFile(ctx, t.TempDir(), io.Discard); codeOf(err) != agentproto.CodeInvalid {
		t.Fatalf("directory: %v", err)
	}
}

func TestListMkdirRemove(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	dir := t.TempDir()
	d := filepath.Join(dir, "x", "y")
	if err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: d, Mode: 0o700}); codeOf(err) != agentproto.CodeNotFound {
		t.Fatalf("mkdir without parents: %v", err)
	}
	if err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: d, Mode: 0o700, Parents: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: d, Mode: 0o700, Parents: true}); err != nil {
		t.Fatalf("mkdir -p of an existing dir: %v", err)
	}
	if err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: d, Mode: 0o700}); codeOf(err) != agentproto.CodeExists || !errors.Is(err, fs.ErrExist) {
		t.Fatalf("mkdir of an existing dir: %v", err)
	}
	if fi, _ := os.Stat(d); !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v", fi.Mode())
	}
	os.WriteFile(filepath.Join(d, "b.txt"), []byte("bbb"), 0o600)
	os.Symlink("b.txt", filepath.Join(d, "a-link"))
	os.Mkdir(filepath.Join(d, "c"), 0o755)
	for i := range 600 { // more than one batch
		os.WriteFile(filepath.Join(d, "c", strings.Repeat("n", 1+i%200)+string(rune('a'+i%26))+string(rune('a'+i/26))), nil, 0o644)
	}
	entries, err := c.List(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name+":"+string(e.Type))
	}
	if strings.Join(got, ",") != "a-link:symlink,b.txt:file,c:dir" || entries[1].Size != 3 || entries[1].Mode != 0o600 {
		t.Fatalf("List = %v (%+v)", got, entries)
	}
	many, err := c.List(ctx, filepath.Join(d, "c"))
	if err != nil || len(many) != 600 {
		t.Fatalf("List of 600: %d entries, %v", len(many), err)
	}
	if _, err := c.List(ctx, filepath.Join(d, "b.txt")); codeOf(err) != agentproto.CodeNotFound {
		t.Fatalf("List of a file: %v", err)
	}
	if err := c.Remove(ctx, d, false); codeOf(err) != agentproto.CodeExists {
		t.Fatalf("remove non-empty: %v", err)
	}
	if err := c.Remove(ctx, filepath.Join(d, "b.txt"), false); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, filepath.Join(dir, "x"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatalf("still there: %v", err)
	}
	if err := c.Remove(ctx, filepath.Join(dir, "x"), true); codeOf(err) != agentproto.CodeNotFound {
		t.Fatalf("remove missing: %v", err)
	}
	if err := c.Remove(ctx, "/", true); codeOf(err) != agentproto.CodeInvalid {
		t.Fatalf("remove /: %v", err)
	}
	if _, err := c.Stat(ctx, filepath.Join(dir, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat missing: %v", err)
	}
}

func TestMoveOwnersLinks(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "a.txt")
	me := strconv.Itoa(os.Getuid())
	if err := c.WriteFile(ctx, src, strings.NewReader("moved"), 0o600, agent.WithOwner(me)); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "x", "y", "b.txt")
	fi, err := c.Move(ctx, agentproto.MoveRequest{Source: src, Destination: dst, Parents: true, Owner: me})
	if err != nil || fi.Name != "b.txt" || fi.Size != 5 || fi.Type != agentproto.TypeFile || fi.UID != uint32(os.Getuid()) || fi.Owner == "" || fi.Group == "" {
		t.Fatalf("Move = %+v, %v", fi, err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "moved" {
		t.Fatalf("destination holds %q", b)
	}
	if _, err := os.Lstat(src); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("source still there: %v", err)
	}
	// Missing source, missing parent without Parents, unknown owner.
	if _, err := c.Move(ctx, agentproto.MoveRequest{Source: src, Destination: dst}); codeOf(err) != agentproto.CodeNotFound {
		t.Fatalf("missing source: %v", err)
	}
	if _, err := c.Move(ctx, agentproto.MoveRequest{Source: dst, Destination: filepath.Join(dir, "no", "c")}); codeOf(err) != agentproto.CodeNotFound {
		t.Fatalf("missing parent: %v", err)
	}
	if _, err := c.Move(ctx, agentproto.MoveRequest{Source: "/", Destination: dst}); codeOf(err) != agentproto.CodeInvalid {
		t.Fatalf("move /: %v", err)
	}
	err = c.WriteFile(ctx, filepath.Join(dir, "u"), strings.NewReader("x"), 0o644, agent.WithOwner("no-such-user-agentbox"))
	if codeOf(err) != agentproto.CodeInvalid || !strings.Contains(err.Error(), `no account "no-such-user-agentbox"`) {
		t.Fatalf("unknown owner: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "u")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused write left a file: %v", err)
	}
	if err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: filepath.Join(dir, "m"), Owner: "no-such-user-agentbox"}); codeOf(err) != agentproto.CodeInvalid {
		t.Fatalf("mkdir unknown owner: %v", err)
	}
	// A symbolic link: stat follows it and names its target; list
	// describes the link itself with its target; a dangling link's
	// target is its text.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dst, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(dir, "zdangling")); err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dst)
	st, err := c.Stat(ctx, link)
	if err != nil || st.Type != agentproto.TypeFile || st.LinkTarget != real {
		t.Fatalf("Stat(link) = %+v, %v", st, err)
	}
	if st, err := c.Stat(ctx, dst); err != nil || st.LinkTarget != "" {
		t.Fatalf("Stat(file) = %+v, %v", st, err)
	}
	entries, err := c.List(ctx, dir)
	if err != nil || len(entries) != 3 {
		t.Fatalf("List = %+v, %v", entries, err)
	}
	if e := entries[0]; e.Name != "link" || e.Type != agentproto.TypeSymlink || e.LinkTarget != real {
		t.Fatalf("link entry %+v", e)
	}
	if e := entries[2]; e.Name != "zdangling" || e.LinkTarget != "nowhere" {
		t.Fatalf("dangling entry %+v", e)
	}
	if e := entries[1]; e.Name != "x" || e.Type != agentproto.TypeDir || e.Owner == "" || e.LinkTarget != "" {
		t.Fatalf("dir entry %+v", e)
	}
}
