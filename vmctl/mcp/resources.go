package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
)

// The resource templates: a sandbox's serial console log and its audit
// log (one JSON entry per line), by ID or name.
const (
	ConsoleURITemplate = "agentbox://sandboxes/{sandbox}/console"
	AuditURITemplate   = "agentbox://sandboxes/{sandbox}/audit"
)

// consoleTail is how much of the console log the console resource holds:
// its last 256 KiB.
const consoleTail = 256 << 10

// auditMax is how much of the audit log the audit resource holds: its
// newest entries within 1 MiB.
const auditMax = 1 << 20

// addResources registers the resource templates.
func (s *Server) addResources() {
	s.srv.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "console",
		Title:       "Sandbox console log",
		URITemplate: ConsoleURITemplate,
		Description: fmt.Sprintf("The last %d KiB of a sandbox's serial console (kernel and boot messages): where to look when it failed to boot or crashed.", consoleTail>>10),
		MIMEType:    "text/plain",
	}, s.readConsole)
	s.srv.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "audit",
		Title:       "Sandbox audit log",
		URITemplate: AuditURITemplate,
		Description: "What was done in a sandbox, oldest first, one JSON object per line: each command, file operation and lifecycle action with its caller, time and outcome.",
		MIMEType:    "application/x-ndjson",
	}, s.readAudit)
}

// sandboxOfURI returns the sandbox of agentbox://sandboxes/{sandbox}/what.
func sandboxOfURI(uri, what string) (string, error) {
	rest, ok := strings.CutPrefix(uri, "agentbox://sandboxes/")
	if !ok {
		return "", sdk.ResourceNotFoundError(uri)
	}
	ref, ok := strings.CutSuffix(rest, "/"+what)
	if !ok || ref == "" || strings.Contains(ref, "/") {
		return "", sdk.ResourceNotFoundError(uri)
	}
	return ref, nil
}

func (s *Server) readConsole(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	ref, err := sandboxOfURI(uri, "console")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := s.cl.Console(ctx, ref, consoleTail, &buf); err != nil {
		return nil, resourceError(ctx, uri, err)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: strings.ToValidUTF8(buf.String(), "\uFFFD")}}}, nil
}

func (s *Server) readAudit(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	ref, err := sandboxOfURI(uri, "audit")
	if err != nil {
		return nil, err
	}
	var lines [][]byte
	size := 0
	err = s.cl.Audit(ctx, ref, func(e audit.Entry) error {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		lines = append(lines, append(b, '\n'))
		size += len(b) + 1
		for size > auditMax && len(lines) > 1 {
			size -= len(lines[0])
			lines = lines[1:]
		}
		return nil
	})
	if err != nil {
		return nil, resourceError(ctx, uri, err)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: "application/x-ndjson", Text: string(bytes.Join(lines, nil))}}}, nil
}

// resourceError is the error of reading resource uri: the context's
// error when it ended (cancelled: see addTool), else err mapped through
// the API's table (toolError) as a JSON-RPC error whose message is
// "CODE: message": a missing sandbox is the SDK's resource-not-found
// error (sdk.CodeResourceNotFound, with the URI in its data), bad input
// invalid params, anything else an internal error.
func resourceError(ctx context.Context, uri string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	te := toolError(err).(*ToolError)
	code := int64(jsonrpc.CodeInternalError)
	switch te.Code {
	case api.CodeNotFound:
		code = sdk.CodeResourceNotFound
	case api.CodeInvalidArgument, api.CodeBadRequest:
		code = jsonrpc.CodeInvalidParams
	}
	data, _ := json.Marshal(map[string]string{"uri": uri})
	return &jsonrpc.Error{Code: code, Message: te.Error(), Data: data}
}
