package api

import "net/http"

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	// Sandboxes are oldest first; never null.
	Sandboxes []Sandbox `json:"sandboxes"`
}

// ProcessList is the body of GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	// Processes are oldest first; never null.
	Processes []Process `json:"processes"`
}

// ExecList is the body of GET /v1/sandboxes/{id}/execs.
type ExecList struct {
	// Execs are oldest first; never null.
	Execs []ExecRecord `json:"execs"`
}

// FileList is the body of GET /v1/sandboxes/{id}/files/list.
type FileList struct {
	// Files are sorted by name; never null.
	Files []FileInfo `json:"files"`
}

// StdinResult is the body of POST .../processes/{pid}/stdin.
type StdinResult struct {
	// Bytes is how many bytes of the request body reached the process's
	// stdin.
	Bytes int64 `json:"bytes"`
}

// Media types and headers of the API.
const (
	// ContentTypeJSON is the type of JSON request and response bodies.
	ContentTypeJSON = "application/json"
	// ContentTypeNDJSON is the type of streamed answers: one JSON value
	// per line (exec and process output: ExecEvent; audit: audit.Entry;
	// events: Event).
	ContentTypeNDJSON = "application/x-ndjson"
	// ContentTypeOctetStream is the type of raw file content and stdin.
	ContentTypeOctetStream = "application/octet-stream"

	// HeaderMode carries a downloaded file's permission bits (FileInfo.Mode,
	// octal, e.g. "0644").
	HeaderMode = "X-Agentbox-Mode"
	// HeaderModTime carries a downloaded file's modification time
	// (FileInfo.ModTime, RFC 3339 with nanoseconds).
	HeaderModTime = "X-Agentbox-Mod-Time"
)

// CodeOf returns the generic stable code of an HTTP error status
// (bad_request for 400, not_found for 404, unavailable for 503, ...;
// internal for the rest): the code of an error without one, e.g. an error
// answer from a proxy whose body is not an ErrorResponse.
func CodeOf(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeBadRequest
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusUnsupportedMediaType:
		return CodeUnsupportedMedia
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	}
	return CodeInternal
}
