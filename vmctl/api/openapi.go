package api

import _ "embed"

// openAPIDocument is the OpenAPI 3.0.3 description of the API, served at
// GET /v1/openapi.yaml; openapi_test.go checks it against the routes
// table, the handlers' answers and the wire types.
//
//go:embed openapi.yaml
var openAPIDocument []byte

// OpenAPI returns a copy of the API's OpenAPI 3.0.3 document (YAML), the
// body of GET /v1/openapi.yaml.
func OpenAPI() []byte { return append([]byte(nil), openAPIDocument...) }
