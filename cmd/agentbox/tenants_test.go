package main

import (
	"strings"
	"testing"
)

func TestReadToken(t *testing.T) {
	if tok, err := readToken(strings.NewReader("  abcdefghijklmnopqrstuvwxyz\n")); err != nil || tok != "abcdefghijklmnopqrstuvwxyz" {
		t.Fatalf("readToken: %q %v", tok, err)
	}
	for in, want := range map[string]string{"": "no token on stdin", "short": "5 bytes long", "abcdefghij klmnopqrstuvwxyz": "white space"} {
		if _, err := readToken(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("readToken(%q): %v, want %q", in, err, want)
		}
	}
}
