package e2b

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// E2B's templateID is the name of one of the daemon's named templates
// (serve --template NAME=DIR|PROFILE, GET /v1/templates): a create sets
// CreateSandboxRequest.Template and the sandbox service resolves it, so a
// template the daemon does not serve is the service's own 404
// template_not_found, whose message lists those it does. The SDK raises
// it as a SandboxError with statusCode 404 and the message, as it does
// for E2B's own "template 'x' not found".

// applyTemplate points req at the template templateID ("" is
// api.DefaultTemplate, the SDK's default "base") and asks for a warm start
// when the front is configured so (Config.Warm). A templateID that cannot
// be an agentbox template name (E2B's "team/name:tag" forms) can never be
// served: it is answered as an unknown one, 404 template_not_found, before
// anything is made.
func (s *Server) applyTemplate(ctx context.Context, templateID string, req *api.CreateSandboxRequest) error {
	if templateID == "" {
		templateID = api.DefaultTemplate
	}
	if !api.ValidTemplateName(templateID) {
		served, _ := s.served(ctx)
		return errdefs.New(errdefs.ErrNotFound, api.CodeTemplateNotFound,
			fmt.Sprintf("template %s not found: agentbox templates are named by 1 to 63 letters, digits, '_', '.', '-'; %s", api.QuoteShort(templateID), served))
	}
	req.Template = templateID
	req.Warm = s.cfg.Warm
	return nil
}

// served says which templates the daemon serves, for an E2B user's
// error: their names, or, when it serves none, how to start it with a
// base template (E2B's create cannot name an image directory, which the
// service's own message suggests). ok is false when the list failed and
// the answer is only a pointer to `agentbox templates`.
func (s *Server) served(ctx context.Context) (msg string, ok bool) {
	list, err := s.cfg.Client.ListTemplates(ctx)
	if err != nil {
		return "list them with `agentbox templates`", false
	}
	if len(list) == 0 {
		return "this daemon serves no templates: start it with `agentbox serve --template base=DIR` (an image directory, or base=PROFILE)", true
	}
	names := make([]string, len(list))
	for i, t := range list {
		names[i] = t.Name
	}
	return "this daemon serves " + strings.Join(names, ", "), true
}

// templateError is err with an E2B user's message when it is the
// service's template_not_found for templateID (whose message suggests
// what only agentbox's own API can do); other errors are err. The
// category and code stay the service's: it maps through the one error
// table (api.ErrorFrom) as before.
func (s *Server) templateError(ctx context.Context, templateID string, err error) error {
	if api.ErrorFrom(err).Code != api.CodeTemplateNotFound {
		return err
	}
	served, ok := s.served(ctx)
	if !ok {
		return err
	}
	return errdefs.New(errdefs.ErrNotFound, api.CodeTemplateNotFound, fmt.Sprintf("template %q not found: %s", templateID, served))
}

// templateOf returns the templateID E2B shows for sb: the name of the
// template it was made from, else (a sandbox made from an image directory
// or restored from a snapshot) its image's name.
func templateOf(sb api.Sandbox) string {
	if sb.Template != "" {
		return sb.Template
	}
	return sb.Image.Name
}
