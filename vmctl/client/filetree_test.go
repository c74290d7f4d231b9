package client_test

import (
	"context"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// TestMoveListDepthOwner: Move, ListDepth and UploadFile's owner reach
// the backend as given, and a bad owner is refused before it.
func TestMoveListDepthOwner(t *testing.T) {
	ctx := context.Background()
	var moved api.MoveRequest
	var depth int
	var up api.UploadRequest
	b := &backendtest.Fake{
		MoveFn: func(ctx context.Context, ref string, req api.MoveRequest) (api.FileInfo, error) {
			moved = req
			return backendtest.File(req.Destination, 3), nil
		},
		ListFn: func(ctx context.Context, ref, p string, d int) ([]api.FileInfo, error) {
			depth = d
			return []api.FileInfo{backendtest.File(p+"/a", 1)}, nil
		},
		UploadFn: func(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
			up = req
			n, err := io.Copy(io.Discard, r)
			return backendtest.File(req.Path, n), err
		},
	}
	c := start(t, b)
	req := api.MoveRequest{Source: "/work/a", Destination: "/work/x/b", Parents: true, Owner: "user"}
	fi, err := c.Move(ctx, "work1", req)
	if err != nil || fi.Path != "/work/x/b" || !reflect.DeepEqual(moved, req) {
		t.Fatalf("Move = %+v, %v; backend got %+v", fi, err, moved)
	}
	for _, d := range []int{1, 2, 5} {
		if _, err := c.ListDepth(ctx, "work1", "/work", d); err != nil || depth != d {
			t.Fatalf("ListDepth(%d): backend got %d, %v", d, depth, err)
		}
	}
	if _, err := c.List(ctx, "work1", "/work"); err != nil || depth != 1 {
		t.Fatalf("List: backend got depth %d, %v", depth, err)
	}
	if _, err := c.ListDepth(ctx, "work1", "/work", 65); !api.HasCode(err, api.CodeInvalidArgument) {
		t.Fatalf("ListDepth(65): %v", err)
	}
	ureq := api.UploadRequest{Path: "/work/f", Mode: 0o600, Parents: true, Owner: "1000"}
	if _, err := c.UploadFile(ctx, "work1", ureq, strings.NewReader("abc")); err != nil || !reflect.DeepEqual(up, ureq) {
		t.Fatalf("UploadFile: backend got %+v, %v", up, err)
	}
	up = api.UploadRequest{}
	_, err = c.UploadFile(ctx, "work1", api.UploadRequest{Path: "/work/f", Owner: "a:b"}, strings.NewReader("abc"))
	if e := api.ErrorFrom(err); e.Status != http.StatusBadRequest || !strings.Contains(e.Message, "not a guest account") || up.Path != "" {
		t.Fatalf("bad owner: %v (backend got %+v)", err, up)
	}
	_, err = c.Move(ctx, "work1", api.MoveRequest{Source: "/", Destination: "/x"})
	if !api.HasCode(err, api.CodeInvalidArgument) {
		t.Fatalf("move /: %v", err)
	}
}
