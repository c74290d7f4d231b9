package domain

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestXMLQEMUUser: a QEMUUser becomes one static DAC label with
// relabel='no' (golden qemu-user.xml), and a spec without one has no
// <seclabel> at all (QEMU runs as qemu.conf's user).
func TestXMLQEMUUser(t *testing.T) {
	s := validSpec()
	s.QEMUUser = &QEMUUser{UID: 200001, GID: 200002}
	got, err := XML(s)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "qemu-user.xml")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("XML differs from %s\n--- got\n%s\n--- want\n%s", path, got, want)
	}
	const label = `<seclabel type="static" model="dac" relabel="no">` + "\n" + `    <label>+200001:+200002</label>` + "\n" + `  </seclabel>`
	if !strings.Contains(got, label) {
		t.Errorf("XML lacks %s:\n%s", label, got)
	}
	plain, err := XML(validSpec())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain, "seclabel") {
		t.Errorf("a spec without QEMUUser has a seclabel:\n%s", plain)
	}
}

func TestValidateQEMUUserRoot(t *testing.T) {
	for _, u := range []QEMUUser{{UID: 0, GID: 5}, {UID: 5, GID: 0}} {
		s := validSpec()
		s.QEMUUser = &u
		err := s.Validate()
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "QEMUUser: uid") {
			t.Errorf("%+v: Validate = %v, want a QEMUUser error", u, err)
		}
	}
}
