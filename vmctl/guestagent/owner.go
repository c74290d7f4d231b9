package guestagent

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// idNames maps the uids and gids of one operation's files to the names of
// the guest's /etc/passwd and /etc/group, read once per operation (a list
// of thousands of entries reads them once).
type idNames struct {
	users, groups map[uint32]string
}

// loadIDNames reads /etc/passwd and /etc/group; a missing file leaves
// its names unknown (numbers are reported).
func loadIDNames() *idNames {
	return &idNames{users: readIDFile("/etc/passwd"), groups: readIDFile("/etc/group")}
}

// readIDFile reads the name (field 1) and id (field 3) of every line of a
// passwd(5) or group(5) file; the first line of an id wins, as getpwuid's.
func readIDFile(name string) map[uint32]string {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	return parseIDs(string(b))
}

// parseIDs is readIDFile on the file's text.
func parseIDs(text string) map[uint32]string {
	m := map[uint32]string{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 || f[0] == "" {
			continue
		}
		id, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			continue
		}
		if _, dup := m[uint32(id)]; !dup {
			m[uint32(id)] = f[0]
		}
	}
	return m
}

func idName(m map[uint32]string, id uint32) string {
	if n, ok := m[id]; ok {
		return n
	}
	return strconv.FormatUint(uint64(id), 10)
}

// describe is fileInfo with the owner, group (n may be nil: names are
// read for this call) and, when p itself is a symbolic link, its target.
func describe(p, name string, fi fs.FileInfo, n *idNames) agentproto.FileInfo {
	info := fileInfo(name, fi)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if n == nil {
			n = loadIDNames()
		}
		info.UID, info.GID = st.Uid, st.Gid
		info.Owner, info.Group = idName(n.users, st.Uid), idName(n.groups, st.Gid)
	}
	if lfi, err := os.Lstat(p); err == nil && lfi.Mode()&fs.ModeSymlink != 0 {
		if t, err := filepath.EvalSymlinks(p); err == nil {
			info.LinkTarget = t
		} else if t, err := os.Readlink(p); err == nil {
			info.LinkTarget = t
		}
	}
	return info
}

// resolveOwner returns the account named by owner (a name or a numeric
// uid); nil for "" (the caller's default). An unknown account is
// CodeInvalid.
func resolveOwner(owner string, def *User) (*User, error) {
	if owner == "" {
		return def, nil
	}
	if u := LookupUser(owner); u != nil {
		return u, nil
	}
	if uid, err := strconv.ParseUint(owner, 10, 32); err == nil {
		return &User{Name: owner, UID: uint32(uid), GID: uint32(uid), Home: "/"}, nil
	}
	return nil, &agentproto.Error{Code: agentproto.CodeInvalid,
		Message: fmt.Sprintf("no account %q in the guest's /etc/passwd: name an existing user (or a numeric uid)", owner)}
}

// move renames req.Source to req.Destination (rename(2): atomic, same
// filesystem) and answers the destination's FileInfo.
func move(fw *agentproto.Writer, req *agentproto.MoveRequest, def *User) error {
	src, _ := agentproto.CleanPath(req.Source) // Validate checked both
	dst, _ := agentproto.CleanPath(req.Destination)
	owner, err := resolveOwner(req.Owner, def)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(src); err != nil {
		return err
	}
	if req.Parents {
		if err := mkdirAllOwned(filepath.Dir(dst), 0o755, owner); err != nil {
			return err
		}
	}
	if err := os.Rename(src, dst); err != nil {
		if le, ok := err.(*os.LinkError); ok {
			err = &fs.PathError{Op: "rename " + src + " to", Path: dst, Err: le.Err}
		}
		return err
	}
	fi, err := os.Lstat(dst)
	if err != nil {
		return err
	}
	return fw.WriteJSON(agentproto.FrameResponse, describe(dst, filepath.Base(dst), fi, nil))
}
