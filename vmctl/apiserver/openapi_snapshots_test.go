package apiserver_test

import (
	"context"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// snapshotSuccessCases cover the snapshot routes (see successCases).
func snapshotSuccessCases() []apiCase {
	return []apiCase{
		{name: "save snapshot", method: "POST", target: sb + "/snapshots", ct: "json", body: `{"name":"before"}`, status: 201, called: true,
			check: header("Location", "/v1/snapshots/before")},
		{name: "list snapshots", method: "GET", target: "/v1/snapshots", status: 200, called: true},
		{name: "list snapshots of a sandbox", method: "GET", target: "/v1/snapshots?sandbox=work1", status: 200, called: true},
		{name: "list no snapshots", method: "GET", target: "/v1/snapshots", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.Snapshot.ListFn = func(context.Context, string) ([]api.Snapshot, error) { return nil, nil }
		}},
		{name: "get snapshot", method: "GET", target: "/v1/snapshots/before", status: 200, called: true},
		{name: "delete snapshot", method: "DELETE", target: "/v1/snapshots/before", status: 204, called: true},
		{name: "restore", method: "POST", target: "/v1/snapshots/before/restore", ct: "json",
			body: `{"name":"work2","labels":{"fork":"a"},"limits":{"ttl_seconds":60}}`, status: 201, called: true,
			check: header("Location", sb)},
		{name: "restore minimal", method: "POST", target: "/v1/snapshots/before/restore", ct: "json", body: `{}`, status: 201, called: true},
		{name: "create warm", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","warm":true}`, status: 201, called: true},
		{name: "list warm templates", method: "GET", target: "/v1/warm", status: 200, called: true},
		{name: "list no warm templates", method: "GET", target: "/v1/warm", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.Warm.ListFn = func(context.Context) ([]api.WarmTemplate, error) { return nil, nil }
		}},
		{name: "delete warm template", method: "DELETE", target: "/v1/warm/" + backendtest.WarmKey, status: 204, called: true},
	}
}

// TestSnapshotRouteErrors: bad names are refused before the backend, and
// the backend's errors keep their status.
func TestSnapshotRouteErrors(t *testing.T) {
	checkRouteErrors(t, []routeError{
		{"name missing", "POST", sb + "/snapshots", `{}`, nil, 400, api.CodeInvalidArgument},
		{"name like an ID", "POST", sb + "/snapshots", `{"name":"0123456789ab"}`, nil, 400, api.CodeInvalidArgument},
		{"name with a slash", "POST", sb + "/snapshots", `{"name":"a/b"}`, nil, 400, api.CodeInvalidArgument},
		{"unknown field", "POST", sb + "/snapshots", `{"name":"a","x":1}`, nil, 400, api.CodeBadRequest},
		{"restore bad name", "POST", "/v1/snapshots/before/restore", `{"name":"-x"}`, nil, 400, api.CodeInvalidArgument},
		{"restore bad label", "POST", "/v1/snapshots/before/restore", `{"labels":{"-":"v"}}`, nil, 400, api.CodeInvalidArgument},
		{"bad sandbox filter", "GET", "/v1/snapshots?sandbox=-", "", nil, 400, api.CodeInvalidArgument},
		{"bad warm key", "DELETE", "/v1/warm/abc", "", nil, 400, api.CodeInvalidArgument},
		{"warm key with upper case", "DELETE", "/v1/warm/ABCDEF0123456789ABCDEF01", "", nil, 400, api.CodeInvalidArgument},
		{"no warm template", "DELETE", "/v1/warm/" + backendtest.WarmKey, "", func(b *backendtest.Fake) {
			b.Warm.DeleteFn = func(context.Context, string) error {
				return api.Errorf(404, api.CodeNotFound, "no warm template")
			}
		}, 404, api.CodeNotFound},
		{"disk full", "POST", sb + "/snapshots", `{"name":"a"}`, func(b *backendtest.Fake) {
			b.Snapshot.SaveFn = func(context.Context, string, api.SaveSnapshotRequest) (api.Snapshot, error) {
				return api.Snapshot{}, api.Errorf(507, api.CodeInsufficientStorage, "disk full")
			}
		}, 507, api.CodeInsufficientStorage},
		{"unusable", "POST", "/v1/snapshots/before/restore", `{}`, func(b *backendtest.Fake) {
			b.Snapshot.RestoreFn = func(context.Context, string, api.RestoreRequest) (api.Sandbox, error) {
				return api.Sandbox{}, api.Errorf(422, api.CodeSnapshotUnusable, "image changed")
			}
		}, 422, api.CodeSnapshotUnusable},
	})
}
