// Package api holds Tollgate's OpenAPI document, api/openapi.yaml, embedded
// so that the api serves the document of the build that answers
// (GET /openapi.yaml).
package api

import _ "embed"

// OpenAPI is api/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
