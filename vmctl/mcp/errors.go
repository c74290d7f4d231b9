package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/vmctl/api"
)

// ToolError is the error of a tool call, which the client gets as an MCP
// tool error (isError, its text "CODE: message"): Code is the API's stable
// error code (api.ErrorFrom of what failed: not_found, conflict,
// invalid_argument, sandbox_not_running, ...), the same a REST client
// gets.
type ToolError struct {
	// Code is the API's error code.
	Code string
	// Message says what failed and what to do.
	Message string
	// Details are the API error's details (e.g. a boot failure's
	// console), if any.
	Details map[string]any
	err     error
}

// Error implements error: "CODE: message", then the details as JSON.
func (e *ToolError) Error() string {
	s := e.Code + ": " + e.Message
	if len(e.Details) > 0 {
		if b, err := json.Marshal(e.Details); err == nil {
			s += " " + string(b)
		}
	}
	return s
}

// Unwrap returns the error the tool failed with.
func (e *ToolError) Unwrap() error { return e.err }

// toolError maps err through the API's one error table (api.ErrorFrom).
func toolError(err error) error {
	var te *ToolError
	if errors.As(err, &te) {
		return te
	}
	e := api.ErrorFrom(err)
	code := e.Code
	if code == "" {
		code = api.CodeOf(e.Status)
	}
	msg := e.Message
	if msg == "" {
		msg = fmt.Sprint(err)
	}
	return &ToolError{Code: code, Message: forAgent(msg), Details: e.Details, err: err}
}

// The daemon's messages say what to do in the words of its CLI and REST
// API (`agentbox ls`, query parameter path=); an agent has tools.
// forAgent rewrites those hints into the tools' names and arguments, in
// this one place: the daemon's messages stay as they are for the other
// fronts.
var (
	// agentHints are literal replacements, applied in order.
	agentHints = strings.NewReplacer(
		"query parameter path ", "path ",
		"`agentbox ls` lists them", "list_sandboxes lists them (with all: true, those of other sessions too)",
		"`agentbox snapshot ls` lists them", "list_snapshots lists them (with all: true, those of other sessions too)",
		"(see `agentbox snapshot ls`)", "(list_snapshots with all: true lists them)",
		"(find it in `agentbox audit`, GET /v1/audit)", "(read the resource agentbox://sandboxes/ID/audit with the sandbox's ID)",
		": use stat", ": read it with read_file",
		"download copies single files (use `agentbox exec SANDBOX -- tar -C DIR -c .` for directories)",
		"read_file reads single files (list_directory lists a directory)",
		"list the sandbox's processes (agentbox ps SANDBOX, GET /v1/sandboxes/{id}/processes) for valid ids",
		"give the process ID start_process answered",
		"or write with parents", "or pass parents: true",
		// Capacity: the daemon's hint and the in-process service's.
		"remove sandboxes, ask for less, or raise --capacity-memory/--capacity-vcpus",
		"destroy sandboxes you no longer need (destroy_sandbox), ask for less (cpus, memory_mib), or have the daemon's operator raise --capacity-memory/--capacity-vcpus",
		"ask for less with --cpus/--memory (an in-process run is held to the host's capacity as `agentbox serve` is)",
		"destroy sandboxes you no longer need (destroy_sandbox) or ask for less (cpus, memory_mib)",
	)
	// agentPatterns are replacements of patterns, applied after agentHints.
	agentPatterns = []struct {
		re   *regexp.Regexp
		repl string
	}{
		// A failed multi-step create or restore names its step
		// ("create step register: ..."): words of the implementation.
		{regexp.MustCompile(`^[a-z]+ step [a-z0-9-]+: `), ""},
		// A guest operation's error as the host's agent client wraps it
		// ("agent: write P: guest: not-found: MESSAGE"): the code is said
		// already.
		{regexp.MustCompile(`^agent: `), ""},
		{regexp.MustCompile(`guest: [a-z-]+: `), ""},
		{regexp.MustCompile("`agentbox snapshot rm ([^`]+)`"), "delete_snapshot (snapshot: $1)"},
		{regexp.MustCompile(`resume it first: agentbox resume (\S+) \(POST [^)]*\), or pass \?resume=true \([^)]*\)`),
			"it must be resumed first (agentbox resume $1: this server has no tool that resumes)"},
	}
)

// forAgent rewrites the CLI and REST hints of a daemon message msg into
// the tools' words (agentHints, agentPatterns).
func forAgent(msg string) string {
	msg = agentHints.Replace(msg)
	for _, p := range agentPatterns {
		msg = p.re.ReplaceAllString(msg, p.repl)
	}
	return msg
}

// handlerRan is the context key of the flag addTool's handler sets: the
// call reached the tool's handler (its arguments were valid).
type handlerRan struct{}

// argumentErrors is the middleware that gives the SDK's own tool errors
// the "CODE: message" form of the others: arguments that do not fit the
// tool's input schema (a missing or mistyped argument) fail before the
// handler runs, with the SDK's text ("validating \"arguments\": ...").
func argumentErrors(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		ran := new(bool)
		res, err := next(context.WithValue(ctx, handlerRan{}, ran), method, req)
		r, ok := res.(*sdk.CallToolResult)
		if err != nil || *ran || !ok || r == nil || !r.IsError {
			return res, err
		}
		var text strings.Builder
		for _, c := range r.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		r.Content = []sdk.Content{&sdk.TextContent{Text: argumentError(text.String())}}
		return r, nil
	}
}

// argumentError is the tool error of the SDK's argument error msg.
func argumentError(msg string) string {
	if rest, ok := strings.CutPrefix(msg, `validating "arguments": `); ok {
		rest = strings.TrimPrefix(rest, "validating root: ")
		return api.CodeInvalidArgument + ": the arguments do not fit the tool's input schema: " + rest
	}
	return api.CodeInvalidArgument + ": the arguments: " + msg
}
