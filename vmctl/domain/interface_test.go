package domain

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInterfaceGolden(t *testing.T) {
	s := validSpec()
	s.Interface = &Interface{Tap: "abx0123456789ab", MAC: "02:ab:01:23:45:67"}
	got, err := XML(s)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "interface.xml")
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
		t.Errorf("XML differs from %s (run go test -update if intended)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
	// Without an interface there is no network device at all.
	none, err := XML(validSpec())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(none, "<interface") {
		t.Errorf("a spec without Interface has an <interface>:\n%s", none)
	}
}

func TestInterfaceValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		iface Interface
		field string
	}{
		{"tap too long", Interface{Tap: "abx0123456789abc", MAC: "02:ab:01:23:45:67"}, "Interface.Tap"},
		{"tap with slash", Interface{Tap: "a/b", MAC: "02:ab:01:23:45:67"}, "Interface.Tap"},
		{"empty tap", Interface{MAC: "02:ab:01:23:45:67"}, "Interface.Tap"},
		{"multicast mac", Interface{Tap: "abx1", MAC: "03:ab:01:23:45:67"}, "Interface.MAC"},
		{"bad mac", Interface{Tap: "abx1", MAC: "02:ab"}, "Interface.MAC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			s.Interface = &tc.iface
			err := s.Validate()
			var fe *fieldError
			if !errors.As(err, &fe) || fe.field != tc.field {
				t.Fatalf("Validate = %v, want an error on %s", err, tc.field)
			}
		})
	}
}
