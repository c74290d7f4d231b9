package api

import "regexp"

// DefaultTemplate is the name of the template the E2B SDK creates from
// when its caller names none (templateID "base"), and the name
// `serve --template DIR` (without NAME=) gives its template.
const DefaultTemplate = "base"

// TemplatePattern is the syntax of template names (serve --template
// NAME=..., CreateSandboxRequest.Template): the sandbox name syntax.
const TemplatePattern = NamePattern

// CodeTemplateNotFound is answered 404 to a create request that names a
// template the daemon does not serve; the message lists the ones it does.
const CodeTemplateNotFound = "template_not_found"

var templateRE = regexp.MustCompile(TemplatePattern)

// ValidTemplateName reports whether name matches TemplatePattern.
func ValidTemplateName(name string) bool { return templateRE.MatchString(name) }

// Template is the API's view of one named template (GET /v1/templates):
// a name the daemon was started with (serve --template NAME=DIR|PROFILE)
// for an image directory on its host, which create requests
// (CreateSandboxRequest.Template, the E2B API's templateID) use instead
// of the directory.
type Template struct {
	// Name is the template's name (TemplatePattern); DefaultTemplate is
	// the one a create without image or template gets.
	Name string `json:"name"`
	// Profile is the flake profile the image was built from when the
	// template was given as NAME=PROFILE (resolved once, when the daemon
	// started); empty for NAME=DIR.
	Profile string `json:"profile,omitempty"`
	// Image is the image: its manifest's name, digest and directory.
	Image ImageRef `json:"image"`
	// VCPUs, MemoryMiB and DiskMiB are the manifest's defaults for a
	// sandbox of this template (MiB; DiskMiB 0: the base disk's own
	// size).
	VCPUs     int   `json:"vcpus"`
	MemoryMiB int   `json:"memory_mib"`
	DiskMiB   int64 `json:"disk_mib,omitempty"`
	// Error says why the image does not load now (it was removed or
	// changed since the daemon started); creates from the template fail
	// with the same message until it is put back. Empty when it loads.
	Error string `json:"error,omitempty"`
}

// TemplateList is the body of GET /v1/templates.
type TemplateList struct {
	// Templates are ordered by name.
	Templates []Template `json:"templates"`
}
