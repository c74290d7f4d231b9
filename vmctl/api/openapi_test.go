package api_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
)

// loadDoc loads and validates the embedded OpenAPI document.
func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI())
	if err != nil {
		t.Fatalf("loading openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	doc := loadDoc(t)
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3", doc.OpenAPI)
	}
}

// schemaTypes maps the wire types to their schema names.
var schemaTypes = map[string]reflect.Type{
	"QEMUProcess":           reflect.TypeFor[api.QEMUProcess](),
	"WarmTemplate":          reflect.TypeFor[api.WarmTemplate](),
	"SecretSpec":            reflect.TypeFor[api.SecretSpec](),
	"SecretInfo":            reflect.TypeFor[api.SecretInfo](),
	"ClusterSecretsRequest": reflect.TypeFor[api.ClusterSecretsRequest](),
	"ClusterSecrets":        reflect.TypeFor[api.ClusterSecrets](),
	"ClusterSecret":         reflect.TypeFor[api.ClusterSecret](),
	"PortForwardRequest":    reflect.TypeFor[api.PortForwardRequest](),
	"PortForward":           reflect.TypeFor[api.PortForward](),
	"PortForwardList":       reflect.TypeFor[api.PortForwardList](),
	"WarmTemplateList":      reflect.TypeFor[api.WarmTemplateList](),
	"Template":              reflect.TypeFor[api.Template](),
	"TemplateList":          reflect.TypeFor[api.TemplateList](),
	"Node":                  reflect.TypeFor[api.Node](),
	"NodeList":              reflect.TypeFor[api.NodeList](),
	"Sandbox":               reflect.TypeFor[api.Sandbox](),
	"ImageRef":              reflect.TypeFor[api.ImageRef](),
	"Limits":                reflect.TypeFor[api.Limits](),
	"PauseRequest":          reflect.TypeFor[api.PauseRequest](),
	"PauseInfo":             reflect.TypeFor[api.PauseInfo](),
	"NetworkPolicy":         reflect.TypeFor[api.NetworkPolicy](),
	"NetworkInfo":           reflect.TypeFor[api.NetworkInfo](),
	"Resources":             reflect.TypeFor[api.Resources](),
	"LimitEnforcement":      reflect.TypeFor[api.LimitEnforcement](),
	"Usage":                 reflect.TypeFor[api.Usage](),
	"MemoryUsage":           reflect.TypeFor[api.MemoryUsage](),
	"SandboxList":           reflect.TypeFor[api.SandboxList](),
	"TimeoutRequest":        reflect.TypeFor[api.TimeoutRequest](),
	"CreateSandboxRequest":  reflect.TypeFor[api.CreateSandboxRequest](),
	"ExecRequest":           reflect.TypeFor[api.ExecRequest](),
	"ExecEvent":             reflect.TypeFor[api.ExecEvent](),
	"ExitStatus":            reflect.TypeFor[api.ExitStatus](),
	"ExecRecord":            reflect.TypeFor[api.ExecRecord](),
	"ExecList":              reflect.TypeFor[api.ExecList](),
	"Process":               reflect.TypeFor[api.Process](),
	"ProcessList":           reflect.TypeFor[api.ProcessList](),
	"KillRequest":           reflect.TypeFor[api.KillRequest](),
	"StdinResult":           reflect.TypeFor[api.StdinResult](),
	"FileInfo":              reflect.TypeFor[api.FileInfo](),
	"WatchEvent":            reflect.TypeFor[api.WatchEvent](),
	"FileList":              reflect.TypeFor[api.FileList](),
	"MkdirRequest":          reflect.TypeFor[api.MkdirRequest](),
	"MoveRequest":           reflect.TypeFor[api.MoveRequest](),
	"Event":                 reflect.TypeFor[api.Event](),
	"Info":                  reflect.TypeFor[api.Info](),
	"Capacity":              reflect.TypeFor[api.Capacity](),
	"Error":                 reflect.TypeFor[api.Error](),
	"ErrorResponse":         reflect.TypeFor[api.ErrorResponse](),
	"Snapshot":              reflect.TypeFor[api.Snapshot](),
	"SnapshotList":          reflect.TypeFor[api.SnapshotList](),
	"SaveSnapshotRequest":   reflect.TypeFor[api.SaveSnapshotRequest](),
	"RestoreRequest":        reflect.TypeFor[api.RestoreRequest](),
	"AuditEntry":            reflect.TypeFor[audit.Entry](),
	"OutputDigest":          reflect.TypeFor[audit.OutputDigest](),
	"TtySession":            reflect.TypeFor[audit.TtySession](),
	"PolicyDecision":        reflect.TypeFor[audit.PolicyDecision](),
	"TtyChunk":              reflect.TypeFor[audit.TtyChunk](),
	"TtySize":               reflect.TypeFor[api.TtySize](),
	"ExecWSMessage":         reflect.TypeFor[api.ExecWSMessage](),
}

// enumSchemas are schemas of plain values, not of structs.
var enumSchemas = map[string]bool{"SandboxState": true}

// TestOpenAPISchemasMatchTypes: every JSON field of every wire type is in
// its schema with the right type and required-ness, and vice versa.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	doc := loadDoc(t)
	for name := range doc.Components.Schemas {
		if _, ok := schemaTypes[name]; !ok && !enumSchemas[name] {
			t.Errorf("schema %s has no Go type in schemaTypes", name)
		}
	}
	byType := map[reflect.Type]string{}
	for name, typ := range schemaTypes {
		byType[typ] = name
	}
	for name, typ := range schemaTypes {
		ref := doc.Components.Schemas[name]
		if ref == nil {
			t.Errorf("type %s has no schema %s in openapi.yaml", typ, name)
			continue
		}
		s := ref.Value
		if !s.Type.Is("object") {
			t.Errorf("schema %s: type %v, want object", name, s.Type.Slice())
		}
		if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
			t.Errorf("schema %s: want additionalProperties: false", name)
		}
		fields := map[string]bool{}
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			tag := f.Tag.Get("json")
			jname, opts, _ := strings.Cut(tag, ",")
			if jname == "-" || !f.IsExported() {
				continue
			}
			fields[jname] = true
			where := name + "." + jname
			prop := s.Properties[jname]
			if prop == nil {
				t.Errorf("%s (Go %s.%s) is missing from the schema", where, typ.Name(), f.Name)
				continue
			}
			optional := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
			if req := slices.Contains(s.Required, jname); req == optional {
				t.Errorf("%s: required in schema = %v, but Go tag %q says optional = %v", where, req, tag, optional)
			}
			checkFieldSchema(t, where, f.Type, prop, byType)
		}
		for p := range s.Properties {
			if !fields[p] {
				t.Errorf("%s.%s is in the schema but not a JSON field of Go %s", name, p, typ)
			}
		}
	}
}

// checkFieldSchema checks that the schema of a field fits its Go type.
func checkFieldSchema(t *testing.T, where string, typ reflect.Type, ref *openapi3.SchemaRef, byType map[reflect.Type]string) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	s := ref.Value
	is := func(want, format string) {
		if !s.Type.Is(want) {
			t.Errorf("%s: schema type %v, want %s (Go %s)", where, s.Type.Slice(), want, typ)
		}
		if format != "" && s.Format != format {
			t.Errorf("%s: schema format %q, want %q (Go %s)", where, s.Format, format, typ)
		}
	}
	switch {
	case typ == reflect.TypeFor[time.Time]():
		is("string", "date-time")
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Uint8:
		is("string", "byte")
	case typ.Kind() == reflect.Struct:
		want := "#/components/schemas/" + byType[typ]
		if byType[typ] == "" || ref.Ref != want {
			t.Errorf("%s: schema $ref %q, want %q (Go %s)", where, ref.Ref, want, typ)
		}
	case typ.Kind() == reflect.Slice:
		is("array", "")
		if s.Items == nil {
			t.Errorf("%s: array without items", where)
			return
		}
		checkFieldSchema(t, where+"[]", typ.Elem(), s.Items, byType)
	case typ.Kind() == reflect.Map:
		is("object", "")
		if typ.Elem().Kind() == reflect.Interface {
			if s.AdditionalProperties.Has == nil || !*s.AdditionalProperties.Has {
				t.Errorf("%s: want additionalProperties: true (Go %s)", where, typ)
			}
			return
		}
		if s.AdditionalProperties.Schema == nil {
			t.Errorf("%s: map without additionalProperties schema (Go %s)", where, typ)
			return
		}
		checkFieldSchema(t, where+"{}", typ.Elem(), s.AdditionalProperties.Schema, byType)
	case typ.Kind() == reflect.String:
		is("string", "")
	case typ.Kind() == reflect.Bool:
		is("boolean", "")
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		is("integer", "")
		if typ.Kind() == reflect.Int64 && s.Format != "int64" {
			t.Errorf("%s: Go int64 wants format int64, got %q", where, s.Format)
		}
		if typ.Kind() >= reflect.Uint && (s.Min == nil || *s.Min != 0) {
			t.Errorf("%s: Go %s wants minimum: 0", where, typ)
		}
	default:
		t.Errorf("%s: no schema check for Go %s", where, typ)
	}
}

// TestOpenAPIErrorCodes: the Error schema's code enum lists exactly the
// stable codes the error table answers.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc := loadDoc(t)
	codes := api.Codes()
	var enum []string
	for _, v := range doc.Components.Schemas["Error"].Value.Properties["code"].Value.Enum {
		enum = append(enum, v.(string))
	}
	slices.Sort(codes)
	slices.Sort(enum)
	if !slices.Equal(codes, enum) {
		t.Errorf("Error.code enum = %v, want %v", enum, codes)
	}
	for _, c := range codes {
		if s := api.StatusOf(c); s < 400 || (s == 500 && c != api.CodeInternal && c != api.CodeBootFailed && c != api.CodeGuestError) {
			t.Errorf("StatusOf(%q) = %d", c, s)
		}
	}
}
