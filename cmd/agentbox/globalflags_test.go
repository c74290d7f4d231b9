package main

import (
	"slices"
	"strings"
	"testing"
)

func TestHoistGlobalFlags(t *testing.T) {
	app := newApp()
	for _, tc := range []struct{ in, want string }{
		{"agentbox serve --socket /s --state-dir /d", "agentbox --socket /s --state-dir /d serve"},
		{"agentbox serve --socket=/s --capacity-vcpus 4 --state-dir /d", "agentbox --socket=/s --state-dir /d serve --capacity-vcpus 4"},
		{"agentbox --log-level debug serve --socket /s", "agentbox --log-level debug --socket /s serve"},
		{"agentbox exec --socket /s -e K=V work1 -- ls --socket x", "agentbox --socket /s exec -e K=V work1 -- ls --socket x"},
		{"agentbox exec work1 -- ls --state-dir x", "agentbox exec work1 -- ls --state-dir x"},
		{"agentbox rm -f --socket /s work1", "agentbox --socket /s rm -f work1"},
		{"agentbox run --keep --uri qemu:///session --image /i -- true", "agentbox --uri qemu:///session run --keep --image /i -- true"},
		{"agentbox ls", "agentbox ls"},
		{"agentbox nosuch --socket /s", "agentbox nosuch --socket /s"},
		{"agentbox serve --bogus --socket /s", "agentbox serve --bogus --socket /s"},
	} {
		got := strings.Join(hoistGlobalFlags(app, strings.Fields(tc.in)), " ")
		if got != tc.want {
			t.Errorf("%s\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
	if in := []string{"agentbox"}; !slices.Equal(hoistGlobalFlags(app, in), in) {
		t.Error("bare agentbox changed")
	}
}
