package guestagent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// defaultEnv is the environment a command of uid starts from: PATH
// (opts.Path or agentproto.DefaultPath), LANG, and HOME, USER and LOGNAME
// from the guest's account of uid (opts.User, else /etc/passwd; HOME=/
// for an unknown uid).
func defaultEnv(uid uint32, opts Options) []string {
	p := opts.Path
	if p == "" {
		p = agentproto.DefaultPath
	}
	env := []string{"PATH=" + p, "LANG=C.UTF-8"}
	u := opts.User
	if u == nil || u.UID != uid {
		u = LookupUser(strconv.FormatUint(uint64(uid), 10))
	}
	switch {
	case u != nil:
		return append(env, "HOME="+u.Home, "USER="+u.Name, "LOGNAME="+u.Name)
	case uid == 0:
		return append(env, "HOME=/root", "USER=root", "LOGNAME=root")
	}
	return append(env, "HOME=/")
}

// LookupUser finds a guest account by name or uid in /etc/passwd
// (passwd(5)); nil if there is none.
func LookupUser(nameOrUID string) *User {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return nil
	}
	return lookupPasswd(string(b), nameOrUID)
}

// lookupPasswd finds nameOrUID in passwd(5) text.
func lookupPasswd(passwd, nameOrUID string) *User {
	for _, line := range strings.Split(passwd, "\n") {
		f := strings.Split(line, ":")
		if len(f) < 7 || (f[0] != nameOrUID && f[2] != nameOrUID) {
			continue
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		home := f[5]
		if home == "" {
			home = "/"
		}
		return &User{Name: f[0], UID: uint32(uid), GID: uint32(gid), Home: home}
	}
	return nil
}

// mergeEnv returns base with extra's "K=V" entries added, an entry of extra
// replacing base's entry with the same key in place.
func mergeEnv(base, extra []string) []string {
	env := append([]string(nil), base...)
	idx := make(map[string]int, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = i
	}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			env[i] = kv
			continue
		}
		idx[k] = len(env)
		env = append(env, kv)
	}
	return env
}

// lookupEnv returns the value of key in env.
func lookupEnv(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// startError is a command start failure with its kind.
type startError struct {
	kind agentproto.ExecErrorKind
	msg  string
}

// Error implements the error interface.
func (e *startError) Error() string { return e.msg }

// lookPath resolves argv0 like a shell: with a "/" it is returned as is
// (execve reports problems, relative to dir); otherwise the first
// executable regular file named argv0 in the PATH list pathList (relative
// entries are taken relative to dir). A match that is not executable is
// reported as ExecPermission when nothing executable is found.
func lookPath(argv0, pathList, dir string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	denied := false
	for _, d := range filepath.SplitList(pathList) {
		if d == "" {
			d = "."
		}
		cand := filepath.Join(d, argv0)
		abs := cand
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(dir, abs)
		}
		fi, err := os.Stat(abs)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if fi.Mode()&0o111 == 0 {
			denied = true
			continue
		}
		if !filepath.IsAbs(cand) {
			cand = "./" + cand // keep execve from treating it as bare name
		}
		return cand, nil
	}
	if denied {
		return "", &startError{agentproto.ExecPermission, fmt.Sprintf("%s: permission denied", argv0)}
	}
	return "", &startError{agentproto.ExecNotFound, fmt.Sprintf("%s: command not found", argv0)}
}

// checkDir verifies that the working directory exists and is a directory.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return &startError{agentproto.ExecBadWorkdir, fmt.Sprintf("working directory %s: %v", dir, err)}
	case !fi.IsDir():
		return &startError{agentproto.ExecBadWorkdir, fmt.Sprintf("working directory %s: not a directory", dir)}
	}
	return nil
}
