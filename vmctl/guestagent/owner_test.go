package guestagent

import (
	"reflect"
	"testing"
)

func TestParseIDs(t *testing.T) {
	got := parseIDs("root:x:0:0:root:/root:/bin/bash\n# comment\nuser:x:1000:1000::/home/user:/bin/bash\ndup:x:1000:5::/:/bin/sh\nbad:x:y:1::/:\n\n")
	want := map[uint32]string{0: "root", 1000: "user"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseIDs = %v, want %v", got, want)
	}
	if idName(got, 1000) != "user" || idName(got, 7) != "7" || idName(nil, 3) != "3" {
		t.Fatal("idName")
	}
}
