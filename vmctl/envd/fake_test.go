package envd_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/envd"
)

// fakePasswd is the guest /etc/passwd the fake service serves.
const fakePasswd = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n"

// fakeData serves the data plane over the fake sandbox service b (every
// request for sandbox backendtest.SandboxID), whose downloads of /etc/passwd
// answer fakePasswd unless b.DownloadFn is set; it returns the server's
// URL.
func fakeData(t *testing.T, b *backendtest.Fake) string {
	t.Helper()
	if b.DownloadFn == nil {
		b.DownloadFn = func(ctx context.Context, ref, p string, open func(api.FileInfo) io.Writer) error {
			if p != "/etc/passwd" {
				return api.Errorf(http.StatusNotFound, api.CodeNotFound, "%s: no such file", p)
			}
			_, err := io.Copy(open(backendtest.File(p, int64(len(fakePasswd)))), strings.NewReader(fakePasswd))
			return err
		}
	}
	as, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	h := envd.NewHandler(client.NewHandler(as.Handler()), envd.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(envd.WithSandbox(r.Context(), backendtest.SandboxID)))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
