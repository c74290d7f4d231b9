package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
)

// fakeWatch is the fake daemon's Watch (cliBackend): "/nope" does not
// exist; any other path reports a scripted sequence and then its own
// removal.
func fakeWatch(ctx context.Context, ref, p string, recursive bool, ready func() error, emit func(api.WatchEvent) error) error {
	if p == "/nope" {
		return api.Errorf(404, api.CodeNotFound, "watch /nope: no such file or directory")
	}
	if err := ready(); err != nil {
		return err
	}
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	info := api.FileInfo{Name: "b c.txt", Path: p + "/b c.txt", Type: api.FileRegular, Size: 6, Mode: "0644", ModTime: at}
	for _, ev := range []api.WatchEvent{
		{Op: api.WatchCreate, Path: p + "/a.txt", Time: at},
		{Op: api.WatchRename, Path: p + "/a.txt", To: p + "/b c.txt", Info: &info, Time: at},
		{Op: api.WatchOverflow, Path: p, Time: at},
		{Op: api.WatchRemove, Path: p, Time: at},
	} {
		if err := emit(ev); err != nil {
			return err
		}
	}
	return nil
}

func TestCLIWatch(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "watch", "--recursive", "w1", "/work").check(t, 0,
		"CREATE /work/a.txt\nRENAME /work/a.txt -> '/work/b c.txt'\nOVERFLOW /work\nREMOVE /work\n",
		"watching /work (recursive)\n/work is gone: the watch ended\n")
	r := d.cli(t, nil, "watch", "--json", "w1", "/work")
	want := `{"op":"RENAME","path":"/work/a.txt","to":"/work/b c.txt","info":{"name":"b c.txt","path":"/work/b c.txt","type":"file","size":6,"mode":"0644","mod_time":"2025-01-02T03:04:05Z"},"time":"2025-01-02T03:04:05Z"}`
	if lines := strings.Split(r.stdout, "\n"); r.code != 0 || len(lines) != 5 || lines[1] != want {
		t.Errorf("--json: exit %d, stdout %q", r.code, r.stdout)
	}
	d.cli(t, nil, "watch", "w1", "/nope").check(t, 125, "", "agentbox: watch /nope: no such file or directory\n")
	d.cli(t, nil, "watch", "w1").check(t, 125, "", "agentbox: want 2 argument(s), got 1: usage: agentbox watch [--recursive] [--json] SANDBOX PATH\n")
}
