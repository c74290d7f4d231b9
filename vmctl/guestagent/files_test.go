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
	if err := c.Mkdir(ctx, d, 0o700, false); codeOf(err) != agentproto.CodeNotFound {
		t.Fatalf("mkdir without parents: %v", err)
	}
	if err := c.Mkdir(ctx, d, 0o700, true); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir(ctx, d, 0o700, true); err != nil {
		t.Fatalf("mkdir -p of an existing dir: %v", err)
	}
	if err := c.Mkdir(ctx, d, 0o700, false); codeOf(err) != agentproto.CodeExists || !errors.Is(err, fs.ErrExist) {
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
