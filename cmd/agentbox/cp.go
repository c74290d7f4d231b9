package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

const cpUsage = "agentbox cp [--mode MODE] [--parents] SRC DST  (one of them SANDBOX:/abs/path, the other a local path or -)"

func cpCommand() *cli.Command {
	return &cli.Command{
		Name:      "cp",
		Usage:     "copy a file between this host and a sandbox",
		ArgsUsage: "SANDBOX:/PATH LOCAL  |  LOCAL SANDBOX:/PATH",
		Description: "Copies one regular file, streamed. Exactly one side is SANDBOX:/absolute/path; the other is a\n" +
			"local path, or - for stdin (upload) or stdout (download). A local path with a colon and no\n" +
			"slash before it is read as a sandbox: write ./a:b. Directories are not copied: use tar through\n" +
			"exec, e.g. `tar -C DIR -cf - . | agentbox exec -i SANDBOX -- tar -C /dst -xf -`.\n\n" +
			"Upload: a DST ending in / or naming a guest directory gets the source's base name; the guest file\n" +
			"gets the local file's permission bits (or --mode; 0644 from stdin) and is written atomically.\n" +
			"Download: a DST naming a local directory gets the source's base name; the file gets the guest\n" +
			"file's permission bits and appears only once complete.\n\n" +
			"A paused sandbox is refused; with --resume it is resumed first.\n\n" +
			"Prints nothing. Exit status: 0 when copied; 125 otherwise.",
		Flags: []cli.Flag{
			resumeFlag(),
			&cli.StringFlag{Name: "mode", Usage: "upload: permission bits of the guest file, octal `MODE` (e.g. 0755)", DefaultText: "the local file's"},
			&cli.BoolFlag{Name: "parents", Aliases: []string{"p"}, Usage: "upload: create missing parent directories in the guest"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			cl = resuming(c, cl)
			args, err := exactArgs(c, 2, cpUsage)
			if err != nil {
				return err
			}
			src, dst, err := parseCpArgs(args[0], args[1])
			if err != nil {
				return err
			}
			var mode *fs.FileMode
			if s := c.String("mode"); s != "" {
				m, err := parseMode(s)
				if err != nil {
					return err
				}
				mode = &m
			}
			if dst.isGuest() {
				return upload(ctx, c, cl, src.path, dst, mode, c.Bool("parents"))
			}
			if mode != nil || c.Bool("parents") {
				return errors.New("--mode and --parents apply to uploads (LOCAL SANDBOX:/PATH) only")
			}
			return download(ctx, c, cl, src, dst.path)
		}),
	}
}

// cpEnd is one side of `agentbox cp`: a guest path (sandbox != "") or a
// local path ("-" for stdin or stdout).
type cpEnd struct {
	sandbox string
	// path is the guest path as written (absolute, maybe with a trailing
	// slash) or the local path.
	path string
}

func (e cpEnd) isGuest() bool { return e.sandbox != "" }

// parseCpArg reads "SANDBOX:/abs/path" as a guest path and anything else
// as a local one. The text before the first colon counts as a sandbox only
// when it is a valid sandbox reference (api.ValidRef: no "/", no space), so
// "./a:b", "/x/a:b" and ":b" are local. The guest path must be absolute.
func parseCpArg(s string) (cpEnd, error) {
	if s == "" {
		return cpEnd{}, fmt.Errorf("empty path: usage: %s", cpUsage)
	}
	i := strings.IndexByte(s, ':')
	if i < 0 || !api.ValidRef(s[:i]) {
		return cpEnd{path: s}, nil
	}
	p := s[i+1:]
	if !path.IsAbs(p) {
		return cpEnd{}, fmt.Errorf("%q: the guest path must be absolute: %s:/path/to/file", s, s[:i])
	}
	return cpEnd{sandbox: s[:i], path: p}, nil
}

// parseCpArgs parses SRC and DST; exactly one must be a guest path.
func parseCpArgs(srcArg, dstArg string) (src, dst cpEnd, err error) {
	if src, err = parseCpArg(srcArg); err != nil {
		return
	}
	if dst, err = parseCpArg(dstArg); err != nil {
		return
	}
	if src.isGuest() == dst.isGuest() {
		err = fmt.Errorf("exactly one of SRC and DST must be SANDBOX:/path, the other local: usage: %s", cpUsage)
	}
	return
}

// parseMode reads octal permission bits ("0755", "644").
func parseMode(s string) (fs.FileMode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("--mode %q: want octal permission bits, 0000 to 0777 (e.g. 0644)", s)
	}
	return fs.FileMode(m), nil
}

// dirHint is the error for a directory given to cp.
func dirHint(what string) error {
	return fmt.Errorf("%s is a directory: cp copies single files; use tar: agentbox exec ... tar (see `agentbox cp --help`)", what)
}

// upload copies the local file (or stdin for "-") to the guest.
func upload(ctx context.Context, c *cli.Context, cl *client.Client, local string, dst cpEnd, mode *fs.FileMode, parents bool) error {
	var r io.Reader
	perm := fs.FileMode(0o644)
	base := ""
	if local == "-" {
		r = c.App.Reader
	} else {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return dirHint(local)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file: cp copies regular files only", local)
		}
		r, perm, base = f, fi.Mode().Perm(), filepath.Base(local)
	}
	if mode != nil {
		perm = *mode
	}
	target := path.Clean(dst.path)
	intoDir := strings.HasSuffix(dst.path, "/")
	if !intoDir {
		fi, err := cl.Stat(ctx, dst.sandbox, target)
		switch {
		case err == nil:
			intoDir = fi.Type == api.FileDir
		case !api.HasCode(err, api.CodeNotFound):
			return err
		}
	}
	if intoDir {
		if base == "" {
			return fmt.Errorf("%s:%s is a directory: with - as SRC, DST must name the file", dst.sandbox, dst.path)
		}
		target = path.Join(target, base)
	}
	_, err := cl.Upload(ctx, dst.sandbox, target, r, perm, parents)
	if err != nil && !parents && api.HasCode(err, api.CodeNotFound) {
		// A missing parent directory and a missing sandbox are both
		// not_found: only the first wants the --parents hint.
		if _, serr := cl.GetSandbox(ctx, dst.sandbox); serr != nil {
			return serr
		}
		return fmt.Errorf("%w (create %s first, or pass --parents)", err, path.Dir(target))
	}
	return err
}

// download copies the guest file to local (stdout for "-"). A local file is
// written to a temporary name beside it and renamed when complete.
func download(ctx context.Context, c *cli.Context, cl *client.Client, src cpEnd, local string) error {
	srcPath := path.Clean(src.path)
	notFile := func(err error) error {
		if api.HasCode(err, api.CodeNotAFile) {
			if fi, serr := cl.Stat(ctx, src.sandbox, srcPath); serr == nil && fi.Type == api.FileDir {
				return dirHint(src.sandbox + ":" + srcPath)
			}
		}
		return err
	}
	if local == "-" {
		_, err := cl.Download(ctx, src.sandbox, srcPath, c.App.Writer)
		return notFile(err)
	}
	target := local
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		target = filepath.Join(local, path.Base(srcPath))
	} else if strings.HasSuffix(local, "/") {
		return fmt.Errorf("%s: no such directory", local)
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".agentbox-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	info, err := cl.Download(ctx, src.sandbox, srcPath, tmp)
	if err != nil {
		return notFile(err)
	}
	if m, err := strconv.ParseUint(info.Mode, 8, 32); err == nil {
		if err := tmp.Chmod(fs.FileMode(m).Perm()); err != nil {
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return err
	}
	done = true
	return nil
}
