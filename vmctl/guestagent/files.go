package guestagent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// listBatch is the number of entries per FrameData batch of OpList: at most
// 256 × ~300 bytes of JSON, far below MaxPayload.
const listBatch = 256

func fileInfo(name string, fi fs.FileInfo) agentproto.FileInfo {
	return agentproto.FileInfo{
		Name:      name,
		Size:      fi.Size(),
		Mode:      fi.Mode(),
		ModTimeNs: fi.ModTime().UnixNano(),
		Type:      agentproto.TypeOf(fi.Mode()),
	}
}

// readFile streams the regular file p as FrameData chunks then FrameDataEnd.
func readFile(fw *agentproto.Writer, p string) error {
	p, err := agentproto.CleanPath(p)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return &agentproto.Error{Code: agentproto.CodeInvalid, Message: fmt.Sprintf("read %s: is a directory", p)}
	}
	buf := make([]byte, agentproto.ChunkSize)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if werr := fw.WriteFrame(agentproto.FrameData, buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return fw.WriteFrame(agentproto.FrameDataEnd, nil)
		}
		if err != nil {
			return err
		}
	}
}

// writeFile receives FrameData frames into a temporary file next to the
// target, then fsyncs, chmods and renames it into place and fsyncs the
// directory. On any error the temporary file is removed.
func writeFile(fr *agentproto.Reader, fw *agentproto.Writer, req *agentproto.WriteFileRequest, def *User) error {
	p, err := agentproto.CleanPath(req.Path)
	if err != nil {
		return err
	}
	owner, err := resolveOwner(req.Owner, def)
	if err != nil {
		return err
	}
	if p == "/" {
		return &agentproto.Error{Code: agentproto.CodeInvalid, Message: "write /: is a directory"}
	}
	dir := path.Dir(p)
	if req.Parents {
		if err := mkdirAllOwned(dir, 0o755, owner); err != nil {
			return err
		}
	}
	tmp, err := os.CreateTemp(dir, agentproto.UploadTempPattern(path.Base(p)))
	if err != nil {
		return tempError(p, dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var size int64
	for done := false; !done; {
		t, b, err := fr.ReadFrame()
		if err != nil {
			return fmt.Errorf("write %s: receive data: %w", p, err)
		}
		switch t {
		case agentproto.FrameData:
			n, err := tmp.Write(b)
			size += int64(n)
			if err != nil {
				return tempError(p, dir, err)
			}
		case agentproto.FrameDataEnd:
			done = true
		default:
			return &agentproto.Error{Code: agentproto.CodeInvalid, Message: fmt.Sprintf("write %s: unexpected %s frame", p, t)}
		}
	}
	if owner != nil {
		if err := tmp.Chown(int(owner.UID), int(owner.GID)); err != nil {
			return tempError(p, dir, err)
		}
	}
	if err := tmp.Chmod(req.Mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)); err != nil {
		return tempError(p, dir, err)
	}
	if err := tmp.Sync(); err != nil {
		return tempError(p, dir, err)
	}
	if err := tmp.Close(); err != nil {
		return tempError(p, dir, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		var le *os.LinkError
		if errors.As(err, &le) {
			err = &fs.PathError{Op: "rename", Path: p, Err: le.Err}
		}
		return err
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return fw.WriteJSON(agentproto.FrameResponse, agentproto.WriteFileResponse{Size: size})
}

// tempError is the error of an operation on the temporary file of a
// write of p in directory dir: it names p (the temporary name means
// nothing to the caller), and a missing dir says so and what to do (the
// host names p: "agent: write P: ...").
func tempError(p, dir string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, fs.ErrNotExist) {
		return &agentproto.Error{Code: agentproto.CodeNotFound,
			Message: fmt.Sprintf("directory %s does not exist: create it first, or write with parents", dir)}
	}
	return &fs.PathError{Op: "write", Path: p, Err: err}
}

func stat(fw *agentproto.Writer, p string) error {
	p, err := agentproto.CleanPath(p)
	if err != nil {
		return err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	return fw.WriteJSON(agentproto.FrameResponse, describe(p, path.Base(p), fi, nil))
}

// list sends the entries of directory p in batches of listBatch.
func list(fw *agentproto.Writer, p string) error {
	p, err := agentproto.CleanPath(p)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	names := loadIDNames()
	batch := make([]agentproto.FileInfo, 0, listBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := fw.WriteJSON(agentproto.FrameData, batch)
		batch = batch[:0]
		return err
	}
	for _, e := range entries {
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return err
		}
		batch = append(batch, describe(path.Join(p, e.Name()), e.Name(), fi, names))
		if len(batch) == listBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	return fw.WriteFrame(agentproto.FrameDataEnd, nil)
}

func mkdir(fw *agentproto.Writer, req *agentproto.MkdirRequest, def *User) error {
	p, err := agentproto.CleanPath(req.Path)
	if err != nil {
		return err
	}
	owner, err := resolveOwner(req.Owner, def)
	if err != nil {
		return err
	}
	mode := req.Mode.Perm()
	if mode == 0 {
		mode = 0o755
	}
	fi, err := os.Lstat(p)
	switch {
	case err == nil && req.Parents && fi.IsDir():
		// mkdir -p of an existing directory succeeds and changes nothing.
	case err == nil:
		return &fs.PathError{Op: "mkdir", Path: p, Err: fs.ErrExist}
	case req.Parents:
		if err := mkdirAllOwned(p, mode, owner); err != nil {
			return err
		}
		err = os.Chmod(p, mode) // not subject to the umask
	default:
		if err := os.Mkdir(p, mode); err != nil {
			return err
		}
		if owner != nil {
			if err := os.Chown(p, int(owner.UID), int(owner.GID)); err != nil {
				return err
			}
		}
		err = os.Chmod(p, mode)
	}
	if err != nil {
		return err
	}
	return fw.WriteJSON(agentproto.FrameResponse, agentproto.Empty{})
}

func remove(fw *agentproto.Writer, req *agentproto.RemoveRequest) error {
	p, err := agentproto.CleanPath(req.Path)
	if err != nil {
		return err
	}
	if p == "/" {
		return &agentproto.Error{Code: agentproto.CodeInvalid, Message: "refusing to remove /"}
	}
	if _, err := os.Lstat(p); err != nil {
		return err
	}
	if req.Recursive {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	if err != nil {
		return err
	}
	return fw.WriteJSON(agentproto.FrameResponse, agentproto.Empty{})
}

// mkdirAllOwned is os.MkdirAll that gives the directories it creates to
// owner (if set); existing ones keep theirs.
func mkdirAllOwned(dir string, perm fs.FileMode, owner *User) error {
	var created []string
	for d := dir; d != "/" && d != "."; d = path.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	if owner == nil {
		return nil
	}
	for _, d := range created {
		if err := os.Lchown(d, int(owner.UID), int(owner.GID)); err != nil {
			return err
		}
	}
	return nil
}
