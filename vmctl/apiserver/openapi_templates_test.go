package apiserver_test

import (
	"context"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// templateSuccessCases cover the template routes and a create by
// template name (see successCases).
func templateSuccessCases() []apiCase {
	return []apiCase{
		{name: "list templates", method: "GET", target: "/v1/templates", status: 200, called: true},
		{name: "list no templates", method: "GET", target: "/v1/templates", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.Templates.ListFn = func(context.Context) ([]api.Template, error) { return nil, nil }
		}},
		{name: "create from a template", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"template":"base"}`, status: 201, called: true,
			setup: func(b *backendtest.Fake) {
				b.CreateSandboxFn = func(_ context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
					sb := backendtest.Sandbox(backendtest.SandboxID)
					sb.Template = req.Template
					return sb, nil
				}
			}},
	}
}

// TestTemplateRouteErrors: a create that names a template is checked
// before the backend, and an unknown template is 404
// template_not_found, an errdefs not found.
func TestTemplateRouteErrors(t *testing.T) {
	unknown := errdefs.New(errdefs.ErrNotFound, api.CodeTemplateNotFound, "template not found")
	checkRouteErrors(t, []routeError{
		{"image and template", "POST", "/v1/sandboxes", `{"image":"/i","template":"base"}`, nil, 400, api.CodeInvalidArgument},
		{"bad template name", "POST", "/v1/sandboxes", `{"template":"a/b"}`, nil, 400, api.CodeInvalidArgument},
		{"neither image nor template", "POST", "/v1/sandboxes", `{}`, nil, 400, api.CodeInvalidArgument},
		{"unknown template", "POST", "/v1/sandboxes", `{"template":"nope"}`, func(b *backendtest.Fake) {
			b.CreateSandboxFn = func(context.Context, api.CreateSandboxRequest) (api.Sandbox, error) {
				return api.Sandbox{}, unknown.WithMessage(`template "nope" not found: this daemon serves base`)
			}
		}, 404, api.CodeTemplateNotFound},
		{"templates unsupported", "GET", "/v1/templates", "", func(b *backendtest.Fake) {
			b.Templates.ListFn = func(context.Context) ([]api.Template, error) {
				return nil, errdefs.ErrUnavailable.WithMessage("shutting down")
			}
		}, 503, api.CodeUnavailable},
	})
}
