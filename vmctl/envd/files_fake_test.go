package envd_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// TestDownloadErrors: files.read's errors speak to an E2B user: a
// missing file is "file P not found" (404, the SDK's FileNotFoundError)
// without the service's internal layers, and a directory (400) points at
// files.list and commands.run with tar, not at the agentbox CLI.
func TestDownloadErrors(t *testing.T) {
	b := &backendtest.Fake{
		DownloadFn: func(ctx context.Context, ref, p string, open func(api.FileInfo) io.Writer) error {
			switch p {
			case "/etc":
				// As the daemon answers it.
				return api.Errorf(http.StatusUnprocessableEntity, api.CodeNotAFile,
					"/etc is a directory, not a regular file: download copies single files (use `agentbox exec SANDBOX -- tar -C DIR -c .` for directories)")
			case "/dev/null":
				return api.Errorf(http.StatusUnprocessableEntity, api.CodeNotAFile,
					"/dev/null is a char device, not a regular file: download copies single files (use `agentbox exec SANDBOX -- tar -C DIR -c .` for directories)")
			}
			return api.Errorf(http.StatusNotFound, api.CodeNotFound,
				"agent: stat %s: guest: not-found: stat %s: no such file or directory", p, p)
		},
	}
	url := fakeData(t, b)
	for _, c := range []struct {
		path   string
		status int
		msg    string
	}{
		{"/nope.txt", 404, "file /nope.txt not found"},
		{"/etc", 400, "/etc is not a regular file: files.read reads one file; list a directory with files.list('/etc'), or archive it with commands.run('tar -C /etc -c .')"},
		{"/dev/null", 400, "/dev/null is not a regular file: files.read reads one file; list a directory with files.list('/dev/null'), or archive it with commands.run('tar -C /dev/null -c .')"},
	} {
		resp, err := http.Get(url + "/files?path=" + c.path)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != c.status || body.Code != c.status || body.Message != c.msg {
			t.Errorf("GET /files?path=%s: %d %+v (%v); want %d %q", c.path, resp.StatusCode, body, err, c.status, c.msg)
		}
	}
}
