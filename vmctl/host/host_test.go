package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/daemon"
)

// TestStartUndoesListeners: a step of serve's Start that fails after the
// listeners were made (here the templates, before libvirt) closes them:
// the socket is gone and another Start may listen on it.
func TestStartUndoesListeners(t *testing.T) {
	sock := filepath.Join(testenv.ShortTempDir(t), "s")
	boom := errors.New("boom")
	o := Options{
		StateDir: t.TempDir(), RuntimeDir: t.TempDir(),
		Socket:    sock,
		Templates: func(context.Context) ([]daemon.Template, error) { return nil, boom },
	}
	for range 2 {
		if _, err := Start(t.Context(), o); !errors.Is(err, boom) {
			t.Fatalf("Start = %v, want the templates' error", err)
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Fatalf("the failed Start left its socket: %v", err)
		}
	}
}

// TestListenTCPNeedsAuth: a TCP listener without a token, TLS or tenants
// is refused before any listener is made.
func TestListenTCPNeedsAuth(t *testing.T) {
	sock := filepath.Join(testenv.ShortTempDir(t), "s")
	_, err := Listen(Options{Socket: sock, ListenTCP: "127.0.0.1:0"})
	if err == nil || !strings.HasPrefix(err.Error(), "refusing to listen on TCP 127.0.0.1:0 without --token-file") {
		t.Fatalf("Listen = %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the refused Listen made its socket: %v", err)
	}
	ls, err := Listen(Options{Socket: sock, ListenTCP: "127.0.0.1:0", Auth: Auth{Token: "0123456789abcdef0123456789abcdef"}})
	if err != nil || len(ls) != 2 {
		t.Fatalf("Listen with a token: %v, %d listeners", err, len(ls))
	}
	for _, l := range ls {
		l.Close()
	}
}
