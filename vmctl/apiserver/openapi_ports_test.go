package apiserver_test

import (
	"context"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// portSuccessCases cover the port forward routes (see successCases).
func portSuccessCases() []apiCase {
	return []apiCase{
		{name: "forward port", method: "POST", target: sb + "/ports", ct: "json", body: `{"guest_port":8000}`, status: 201, called: true,
			check: header("Location", sb+"/ports/8000")},
		{name: "forward port published", method: "POST", target: sb + "/ports", ct: "json", body: `{"guest_port":80,"host_addr":"0.0.0.0:8080"}`, status: 201, called: true},
		{name: "list ports", method: "GET", target: sb + "/ports", status: 200, called: true},
		{name: "list no ports", method: "GET", target: sb + "/ports", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.Ports.ListFn = func(context.Context, string) ([]api.PortForward, error) { return nil, nil }
		}, check: bodyIs(`{"ports":[]}` + "\n")},
		{name: "remove port", method: "DELETE", target: sb + "/ports/8000", status: 204, called: true},
	}
}

// TestPortRouteErrors: bad ports and addresses are refused before the
// backend, and the backend's errors keep their status.
func TestPortRouteErrors(t *testing.T) {
	checkRouteErrors(t, []routeError{
		{"guest port missing", "POST", sb + "/ports", `{}`, nil, 400, api.CodeInvalidArgument},
		{"guest port 0", "POST", sb + "/ports", `{"guest_port":0}`, nil, 400, api.CodeInvalidArgument},
		{"guest port too big", "POST", sb + "/ports", `{"guest_port":65536}`, nil, 400, api.CodeInvalidArgument},
		{"guest port negative", "POST", sb + "/ports", `{"guest_port":-1}`, nil, 400, api.CodeInvalidArgument},
		{"guest port a string", "POST", sb + "/ports", `{"guest_port":"80"}`, nil, 400, api.CodeBadRequest},
		{"host addr without port", "POST", sb + "/ports", `{"guest_port":80,"host_addr":"127.0.0.1"}`, nil, 400, api.CodeInvalidArgument},
		{"host addr a name", "POST", sb + "/ports", `{"guest_port":80,"host_addr":"localhost:8080"}`, nil, 400, api.CodeInvalidArgument},
		{"host port too big", "POST", sb + "/ports", `{"guest_port":80,"host_addr":"127.0.0.1:70000"}`, nil, 400, api.CodeInvalidArgument},
		{"unknown field", "POST", sb + "/ports", `{"guest_port":80,"x":1}`, nil, 400, api.CodeBadRequest},
		{"remove port 0", "DELETE", sb + "/ports/0", "", nil, 400, api.CodeInvalidArgument},
		{"remove port with a sign", "DELETE", sb + "/ports/+80", "", nil, 400, api.CodeInvalidArgument},
		{"remove port not a number", "DELETE", sb + "/ports/http", "", nil, 400, api.CodeInvalidArgument},
		{"address in use", "POST", sb + "/ports", `{"guest_port":80,"host_addr":"127.0.0.1:8080"}`, func(b *backendtest.Fake) {
			b.Ports.ForwardFn = func(context.Context, string, api.PortForwardRequest) (api.PortForward, error) {
				return api.PortForward{}, api.Errorf(409, api.CodeConflict, "127.0.0.1:8080 is already in use")
			}
		}, 409, api.CodeConflict},
		{"no such forward", "DELETE", sb + "/ports/8000", "", func(b *backendtest.Fake) {
			b.Ports.RemoveFn = func(context.Context, string, int) error {
				return api.Errorf(404, api.CodeNotFound, "no forward of guest port 8000")
			}
		}, 404, api.CodeNotFound},
	})
}
