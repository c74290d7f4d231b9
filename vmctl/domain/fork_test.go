package domain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenIDGolden: <genid/> without a value, so libvirt makes a new GUID
// for every domain start.
func TestGenIDGolden(t *testing.T) {
	s := validSpec()
	s.GenID = true
	got, err := XML(s)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "genid.xml")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("XML differs from %s (run with -update to accept):\n%s", path, got)
	}
	if !strings.Contains(got, "<genid></genid>") {
		t.Error("XML lacks <genid></genid>")
	}
	if s.GenID = false; strings.Contains(must(XML(s)), "genid") {
		t.Error("a spec without GenID has a genid element")
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}
