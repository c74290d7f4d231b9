package mcp

import (
	"encoding/json"
	"errors"
	"fmt"

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
	return &ToolError{Code: code, Message: msg, Details: e.Details, err: err}
}
