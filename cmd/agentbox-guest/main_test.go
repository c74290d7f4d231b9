package main

import (
	"bytes"
	"reflect"
	"testing"
)

func TestParseCmdline(t *testing.T) {
	got := parseCmdline("console=ttyS0 root=/dev/vda rw quiet agentbox.port=org.x.1 agentbox.hostname=\"box\" agentbox.port=org.x.2\n")
	want := map[string]string{
		"console": "ttyS0", "root": "/dev/vda", "rw": "", "quiet": "",
		"agentbox.port": "org.x.2", "agentbox.hostname": "box",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestParseFlags(t *testing.T) {
	var stderr bytes.Buffer
	c, err := parseFlags([]string{"--port", "p.0", "--init"}, &stderr)
	if err != nil || c != (config{port: "p.0", init: true}) {
		t.Fatalf("got %+v %v", c, err)
	}
	if _, err := parseFlags([]string{"extra"}, &stderr); err == nil {
		t.Fatal("accepted a positional argument")
	}
	if code := run([]string{"--bogus"}, &stderr); code != 2 {
		t.Fatalf("exit %d for a bad flag", code)
	}
}
