package httpapi

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

// The OpenAPI document is kept honest by these tests: every route the server
// registers is documented, every documented operation is served, and the
// document holds together (references resolve, path parameters declared).

const openAPIPath = "../../api/openapi.yaml"

var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// readOpenAPI returns the document as a generic tree.
func readOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatalf("read %s: %v", openAPIPath, err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", openAPIPath, err)
	}
	return doc
}

// documentedOperations lists "METHOD /path" of every operation.
func documentedOperations(t *testing.T, doc map[string]any) []string {
	t.Helper()
	paths, ok := doc["paths"].(map[string]any)
	if !ok {
		t.Fatal("openapi: no paths")
	}
	var ops []string
	for path, item := range paths {
		item, ok := item.(map[string]any)
		if !ok {
			t.Fatalf("openapi: path %s is not an object", path)
		}
		for _, m := range openAPIMethods {
			if _, ok := item[m]; ok {
				ops = append(ops, strings.ToUpper(m)+" "+path)
			}
		}
	}
	slices.Sort(ops)
	return ops
}

// isHTMLRoute tells the web pages (the tenant dashboard and the admin
// console, server-rendered HTML, outside the JSON API) from API routes.
func isHTMLRoute(path string) bool {
	switch {
	case path == "/dashboard" || strings.HasPrefix(path, "/dashboard/"):
		return true
	case path == "/admin" || (strings.HasPrefix(path, "/admin/") && !strings.HasPrefix(path, "/admin/v1/")):
		return true
	case strings.HasPrefix(path, "/static/") || path == "/favicon.ico":
		return true
	}
	return false
}

var echoParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// registeredOperations lists "METHOD /path" of every API route of the real
// server, with echo's :param written as OpenAPI's {param}.
func registeredOperations(t *testing.T) []string {
	t.Helper()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	ents := entitlements.NewService(pool, limitstore.New(rdb, prefix), nil, entitlements.Options{})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	srv, err := NewServer(Deps{DB: pool, Redis: rdb, AdminToken: "tga_openapi_test", Entitlements: ents, Catalogue: cat, Credentials: credentials.New(pool, ents, nil, credentials.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var ops []string
	for _, r := range srv.Echo().Routes() {
		// Group middleware makes echo register catch-all "route not found"
		// routes; they are not endpoints.
		if r.Method == "echo_route_not_found" || strings.Contains(r.Path, "*") || isHTMLRoute(r.Path) {
			continue
		}
		op := r.Method + " " + echoParam.ReplaceAllString(r.Path, "{$1}")
		if !seen[op] {
			seen[op] = true
			ops = append(ops, op)
		}
		// ServeHTTP answers HEAD on every GET route.
		if r.Method == "GET" && !seen["HEAD "+op[4:]] {
			seen["HEAD "+op[4:]] = true
			ops = append(ops, "HEAD "+op[4:])
		}
	}
	slices.Sort(ops)
	return ops
}

func TestOpenAPIDocumentsEveryRouteAndOnlyServedOnes(t *testing.T) {
	t.Parallel()
	documented := documentedOperations(t, readOpenAPI(t))
	registered := registeredOperations(t)
	if len(registered) == 0 {
		t.Fatal("the server registers no routes")
	}
	for _, op := range registered {
		if !slices.Contains(documented, op) {
			t.Errorf("route %s is served but not in api/openapi.yaml", op)
		}
	}
	for _, op := range documented {
		if isHTMLRoute(strings.SplitN(op, " ", 2)[1]) {
			t.Errorf("%s: the HTML pages are not part of the JSON API document", op)
			continue
		}
		if !slices.Contains(registered, op) {
			t.Errorf("api/openapi.yaml documents %s, which the server does not serve", op)
		}
	}
}

func TestOpenAPIDocumentHoldsTogether(t *testing.T) {
	t.Parallel()
	doc := readOpenAPI(t)
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi version %q, want 3.1.x", v)
	}
	schemes := map[string]bool{}
	if c, ok := doc["components"].(map[string]any); ok {
		if s, ok := c["securitySchemes"].(map[string]any); ok {
			for name := range s {
				schemes[name] = true
			}
		}
	}

	// Every $ref resolves inside the document.
	var walk func(node any, where string)
	walk = func(node any, where string) {
		switch n := node.(type) {
		case map[string]any:
			if ref, ok := n["$ref"].(string); ok {
				if _, err := resolveRef(doc, ref); err != "" {
					t.Errorf("%s: $ref %s: %s", where, ref, err)
				}
			}
			for k, v := range n {
				walk(v, where+"/"+k)
			}
		case []any:
			for i, v := range n {
				walk(v, where+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(doc, "#")

	operationIDs := map[string]string{}
	paths, _ := doc["paths"].(map[string]any)
	placeholder := regexp.MustCompile(`\{([^}]+)\}`)
	for path, item := range paths {
		item, _ := item.(map[string]any)
		pathParams := declaredPathParams(t, doc, item["parameters"])
		for _, m := range openAPIMethods {
			op, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			name := strings.ToUpper(m) + " " + path
			params := declaredPathParams(t, doc, op["parameters"])
			for p := range pathParams {
				params[p] = true
			}
			for _, ph := range placeholder.FindAllStringSubmatch(path, -1) {
				if !params[ph[1]] {
					t.Errorf("%s: path parameter %s is not declared", name, ph[1])
				}
			}
			id, _ := op["operationId"].(string)
			if id == "" {
				t.Errorf("%s: no operationId", name)
			} else if other, dup := operationIDs[id]; dup {
				t.Errorf("%s: operationId %s also used by %s", name, id, other)
			}
			operationIDs[id] = name
			if resp, _ := op["responses"].(map[string]any); len(resp) == 0 {
				t.Errorf("%s: no responses", name)
			}
			sec, hasSec := op["security"].([]any)
			if !hasSec {
				t.Errorf("%s: security not stated (use [] for none)", name)
			}
			for _, req := range sec {
				for s := range req.(map[string]any) {
					if !schemes[s] {
						t.Errorf("%s: unknown security scheme %s", name, s)
					}
				}
			}
			// Admin routes need the admin token, tenant routes an API key.
			wantScheme := ""
			switch {
			case strings.HasPrefix(path, "/admin/v1/"):
				wantScheme = "adminToken"
			case strings.HasPrefix(path, "/v1/"):
				wantScheme = "apiKey"
			}
			if wantScheme != "" && (len(sec) != 1 || sec[0].(map[string]any)[wantScheme] == nil) {
				t.Errorf("%s: security %v, want %s", name, sec, wantScheme)
			}
		}
	}
}

// declaredPathParams returns the names of the "in: path" parameters of a
// parameters list, following $refs.
func declaredPathParams(t *testing.T, doc map[string]any, list any) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	items, _ := list.([]any)
	for _, p := range items {
		pm, _ := p.(map[string]any)
		if ref, ok := pm["$ref"].(string); ok {
			r, _ := resolveRef(doc, ref)
			pm, _ = r.(map[string]any)
		}
		if pm["in"] == "path" {
			name, _ := pm["name"].(string)
			out[name] = true
		}
	}
	return out
}

// resolveRef follows a local JSON pointer ("#/components/schemas/Plan");
// the error is "" when it resolves.
func resolveRef(doc map[string]any, ref string) (any, string) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, "not a local reference"
	}
	var node any = doc
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := node.(map[string]any)
		if !ok {
			return nil, "walks into a non-object"
		}
		if node, ok = m[part]; !ok {
			return nil, "no " + part
		}
	}
	return node, ""
}

// GET /openapi.yaml serves this very document, without credentials.
func TestServesItsOwnOpenAPIDocument(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	r := a.do(t, "GET", "/openapi.yaml", "", nil)
	want, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != 200 || string(r.Raw) != string(want) || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/yaml") {
		t.Fatalf("GET /openapi.yaml: %d %q, %d bytes (want %d)", r.Status, r.Header.Get("Content-Type"), len(r.Raw), len(want))
	}
}
