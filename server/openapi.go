package server

import _ "embed"

// OpenAPI is the API's OpenAPI 3 description, served at /v1/openapi.yaml.
// The end-to-end tests validate every request and response against it.
//
//go:embed openapi.yaml
var OpenAPI []byte
