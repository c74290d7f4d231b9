package apiserver

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
)

// decodeJSON reads a JSON request body into v (a pointer to a struct):
// Content-Type application/json or none (415 otherwise), at most
// MaxJSONBodyBytes (413), one JSON object with only the struct's fields,
// spelled exactly as the JSON tags (400 bad_request naming the field),
// values of the right types (400 naming field and type), nothing after it.
func decodeJSON(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != api.ContentTypeJSON {
			return api.Errorf(http.StatusUnsupportedMediaType, api.CodeUnsupportedMedia,
				"Content-Type %s is not %s: send the request body as JSON", api.QuoteShort(ct), api.ContentTypeJSON)
		}
	}
	if r.ContentLength > api.MaxJSONBodyBytes {
		return tooLarge(r.ContentLength)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, api.MaxJSONBodyBytes+1))
	if err != nil {
		return badRequest("reading the request body: %v", err)
	}
	if len(body) > api.MaxJSONBodyBytes {
		return tooLarge(-1)
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return badRequest("the request body is empty: send a JSON object (%s)", fieldList(reflect.TypeOf(v).Elem()))
	}
	if trimmed[0] != '{' {
		return badRequest("the request body must be a JSON object (%s)", fieldList(reflect.TypeOf(v).Elem()))
	}
	if json.Valid(body) {
		// Unknown fields first, named with their path ("limits.ttl").
		// encoding/json matches field names case-insensitively; the API
		// does not: a field spelled "Image" is unknown, as the OpenAPI
		// document says.
		if err := checkKeys(body, reflect.TypeOf(v).Elem(), ""); err != nil {
			return err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, reflect.TypeOf(v).Elem())
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		return badRequest("unexpected data after the JSON object at byte %d: send exactly one object", dec.InputOffset()-int64(len(extra)))
	}
	return nil
}

// tooLarge is the 413 of a JSON body over MaxJSONBodyBytes; n < 0 when the
// length is not known.
func tooLarge(n int64) error {
	e := api.Errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge,
		"the JSON request body is over the %d-byte limit: send files with PUT /v1/sandboxes/{id}/files and large stdin through a detached process's stdin endpoint", api.MaxJSONBodyBytes)
	e.Details = map[string]any{"limit_bytes": api.MaxJSONBodyBytes}
	if n >= 0 {
		e.Details["content_length"] = n
	}
	return e
}

// jsonError turns a decoding error into a 400 that names the field.
func jsonError(err error, t reflect.Type) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var b64 base64.CorruptInputError
	switch {
	case errors.As(err, &syn):
		return badRequest("the request body is not valid JSON at byte %d: %v", syn.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("the request body ends in the middle of the JSON object")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return badRequest("the request body holds a %s where an object was expected", typ.Value)
		}
		return badRequest("field %q must be %s, not %s", field, describeType(typ.Type), describeValue(typ.Value))
	case errors.As(err, &b64):
		return badRequest("a bytes field (e.g. stdin) is not valid base64: %v", err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return unknownField(name, t)
	}
	return badRequest("the request body is not a valid %s: %v", t.Name(), err)
}

// unknownField is the 400 for a field t does not have.
func unknownField(name string, t reflect.Type) error {
	return badRequest("unknown field %q in the request body: %s takes %s", name, t.Name(), fieldList(t))
}

// checkKeys checks that every key of the JSON object in data is spelled
// exactly as a JSON tag of t, recursing into struct-typed fields; prefix
// is the dotted path of data's object.
func checkKeys(data []byte, t reflect.Type, prefix string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeOf(time.Time{}) {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return nil // not an object: the typed decode already judged it
	}
	fields := jsonFields(t)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f, ok := fields[k]
		if !ok {
			return unknownField(prefix+k, t)
		}
		if err := checkKeys(obj[k], f.Type, prefix+k+"."); err != nil {
			return err
		}
	}
	return nil
}

// jsonFields maps the JSON names of t's exported fields to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	m := make(map[string]reflect.StructField)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f
	}
	return m
}

// fieldList lists t's JSON field names for error messages.
func fieldList(t reflect.Type) string {
	var names []string
	for n := range jsonFields(t) {
		names = append(names, n)
	}
	slices.Sort(names)
	return "fields " + strings.Join(names, ", ")
}

// describeType says in words what JSON a Go type takes.
func describeType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeOf(time.Time{}) {
		return "an RFC 3339 time string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		return fmt.Sprintf("an integer from 0 to %d", uint64(1)<<(t.Bits())-1)
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(describeType(t.Elem()), "an "), "a ") + "s"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

// describeValue words encoding/json's UnmarshalTypeError.Value.
func describeValue(v string) string {
	switch v {
	case "object", "array":
		return "an " + v
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	}
	if strings.HasPrefix(v, "number") {
		return v
	}
	return "a " + v
}

// checkQuery checks r's query: it must parse, name only params the route
// takes and give each (but the repeatable "label") at most once.
func checkQuery(r *http.Request, allowed []string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("the query string is malformed: %v", err)
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return nil, badRequest("unknown query parameter %s: this route takes none", api.QuoteShort(k))
			}
			return nil, badRequest("unknown query parameter %s: this route takes %s", api.QuoteShort(k), strings.Join(allowed, ", "))
		}
		if len(q[k]) > 1 && k != "label" {
			return nil, badRequest("query parameter %q is given %d times: give it once", k, len(q[k]))
		}
	}
	return q, nil
}

// queryBool parses a boolean query parameter ("" or absent: false).
func queryBool(q url.Values, name string) (bool, error) {
	s := q.Get(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badRequest("query parameter %s=%s is not a boolean: use true or false", name, api.QuoteShort(s))
	}
	return b, nil
}

// queryInt parses a non-negative integer query parameter (absent: 0).
func queryInt(q url.Values, name string) (int64, error) {
	s := q.Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("query parameter %s=%s is not a non-negative integer", name, api.QuoteShort(s))
	}
	return n, nil
}
