package api

// SecretSpec is one secret of a create request (CreateSandboxRequest.Secrets).
type SecretSpec struct {
	// Name is the environment variable the guest finds the placeholder
	// in: letters, digits and '_', not starting with a digit.
	Name string `json:"name"`
	// Value is the real value, at most 16 KiB, no control characters but
	// tab. It is write-only: no answer of the API, no audit entry and no
	// log carries it.
	Value string `json:"value"`
	// Hosts are the exact host names (no wildcard, no port) whose HTTPS
	// requests get the value in their headers; each must be allowed by
	// the sandbox's network allowlist.
	Hosts []string `json:"hosts"`
}

// SecretInfo is a sandbox's secret as the API shows it (Sandbox.Secrets).
type SecretInfo struct {
	// Name is the environment variable holding the placeholder.
	Name string `json:"name"`
	// Placeholder is what the guest sees instead of the value:
	// "agentbox-secret-NAME-" and 32 hex digits, random per sandbox.
	Placeholder string `json:"placeholder"`
	// Hosts are the names the value is sent to.
	Hosts []string `json:"hosts"`
}
