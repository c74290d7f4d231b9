package main

import (
	"errors"

	"github.com/agentbox/agentbox/vmctl/api"
)

// isCode reports whether err is an API error with the given code.
func isCode(err error, code string) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == code
}
