package backendtest

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/vmctl/api"
)

// memFiles is the part of a Memory that keeps its sandboxes'
// filesystems.
type memFiles struct{ *memState }

// memFile is a file or directory of a sandbox's filesystem.
type memFile struct {
	data []byte
	mode fs.FileMode
	dir  bool
}

// File returns the content and mode of the file (or directory) at p in
// the filesystem of sandbox id; ok is false when there is none.
func (m *memFiles) File(id, p string) (data []byte, mode fs.FileMode, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[id][p]
	if !ok {
		return nil, 0, false
	}
	return bytes.Clone(f.data), f.mode, true
}

// fs returns a running sandbox's files; m.mu must be held.
func (m *memFiles) fs(ref string) (map[string]*memFile, error) {
	sb, err := m.running(ref)
	if err != nil {
		return nil, err
	}
	return m.files[sb.ID], nil
}

func fileInfo(p string, f *memFile) api.FileInfo {
	fi := api.FileInfo{Name: path.Base(p), Path: p, Type: api.FileRegular, Size: int64(len(f.data)), Mode: fmt.Sprintf("%04o", f.mode)}
	if f.dir {
		fi.Type = api.FileDir
	}
	return fi
}

// parentDirs checks (or with parents, makes) the directories above p.
func parentDirs(files map[string]*memFile, p string, parents bool) error {
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if f, ok := files[d]; !ok && parents {
			files[d] = &memFile{dir: true, mode: 0o755}
		} else if !ok || !f.dir {
			return notFound("%s: no such directory: create it or pass parents", d)
		}
	}
	return nil
}

func (m *memFiles) upload(ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return api.FileInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return api.FileInfo{}, err
	}
	if err := parentDirs(files, req.Path, req.Parents); err != nil {
		return api.FileInfo{}, err
	}
	f := &memFile{data: data, mode: req.Mode}
	files[req.Path] = f
	return fileInfo(req.Path, f), nil
}

func (m *memFiles) download(ref, p string, open func(api.FileInfo) io.Writer) error {
	m.mu.Lock()
	files, err := m.fs(ref)
	var f *memFile
	if err == nil {
		var ok bool
		if f, ok = files[p]; !ok {
			err = notFound("%s: no such file", p)
		} else if f.dir {
			err = api.Errorf(http.StatusUnprocessableEntity, api.CodeNotAFile, "%s is a directory, not a file", p)
		}
	}
	m.mu.Unlock()
	if err != nil {
		return err
	}
	_, err = open(fileInfo(p, f)).Write(f.data)
	return err
}

func (m *memFiles) stat(ref, p string) (api.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return api.FileInfo{}, err
	}
	f, ok := files[p]
	if !ok {
		return api.FileInfo{}, notFound("%s: no such file", p)
	}
	return fileInfo(p, f), nil
}

// under reports whether p is below dir, and how many levels.
func under(dir, p string) (int, bool) {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	if p == dir || !strings.HasPrefix(p, prefix) {
		return 0, false
	}
	return strings.Count(p[len(prefix):], "/") + 1, true
}

func (m *memFiles) list(ref, p string, depth int) ([]api.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return nil, err
	}
	d, ok := files[p]
	if !ok {
		return nil, notFound("%s: no such directory", p)
	}
	if !d.dir {
		return nil, api.Errorf(http.StatusUnprocessableEntity, api.CodeNotADirectory, "%s is a file, not a directory", p)
	}
	var out []api.FileInfo
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		if n, ok := under(p, name); ok && n <= max(depth, 1) {
			out = append(out, fileInfo(name, files[name]))
		}
	}
	return out, nil
}

func (m *memFiles) move(ref string, req api.MoveRequest) (api.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return api.FileInfo{}, err
	}
	f, ok := files[req.Source]
	if !ok {
		return api.FileInfo{}, notFound("%s: no such file", req.Source)
	}
	if err := parentDirs(files, req.Destination, false); err != nil {
		return api.FileInfo{}, err
	}
	for name, g := range files {
		if _, ok := under(req.Source, name); ok {
			delete(files, name)
			files[req.Destination+name[len(req.Source):]] = g
		}
	}
	delete(files, req.Source)
	files[req.Destination] = f
	return fileInfo(req.Destination, f), nil
}

func (m *memFiles) mkdir(ref string, req api.MkdirRequest) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return err
	}
	if err := parentDirs(files, req.Path, req.Parents); err != nil {
		return err
	}
	if f, ok := files[req.Path]; ok && !(f.dir && req.Parents) {
		return api.Errorf(http.StatusConflict, api.CodeConflict, "%s exists already", req.Path)
	}
	files[req.Path] = &memFile{dir: true, mode: 0o755}
	return nil
}

func (m *memFiles) removeFile(ref, p string, recursive bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return err
	}
	if _, ok := files[p]; !ok {
		return notFound("%s: no such file", p)
	}
	for name := range files {
		if _, ok := under(p, name); ok {
			if !recursive {
				return api.Errorf(http.StatusConflict, api.CodeConflict, "%s is a directory that is not empty: remove it recursively", p)
			}
			delete(files, name)
		}
	}
	delete(files, p)
	return nil
}
