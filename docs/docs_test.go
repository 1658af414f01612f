// Package docs holds no code: its test keeps README.md and the pages under
// docs/ honest. Every environment variable the configuration reads is
// documented in configuration.md, and every environment variable, route and
// test the docs name exists, so a rename or a removal cannot leave a page
// describing something that is gone.
package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgatehq/tollgate/internal/config"
)

const root = ".."

// envName is the shape of an environment variable: upper case words joined
// by underscores (a single word, such as CI, is too common in prose to pick out).
var envName = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$`)

// docPages are the files the checks read: the README and every docs/ page.
func docPages(t *testing.T) map[string]string {
	t.Helper()
	pages := map[string]string{}
	names, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append(names, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		pages[n] = string(b)
	}
	if len(pages) < 9 {
		t.Fatalf("found %d pages, want README.md and the docs/ topic pages", len(pages))
	}
	return pages
}

// goStrings returns every string literal of the Go files under dirs
// (relative to the module root) that satisfies keep; tests included when
// withTests.
func goStrings(t *testing.T, withTests bool, keep func(string) bool, dirs ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && (strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata") {
				return filepath.SkipDir
			}
			if e.IsDir() || !strings.HasSuffix(p, ".go") || (!withTests && strings.HasSuffix(p, "_test.go")) {
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if l, ok := n.(*ast.BasicLit); ok && l.Kind == token.STRING {
					if s, err := strconv.Unquote(l.Value); err == nil && keep(s) {
						out[s] = true
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// configVars is every variable internal/config reads: those Load asks for
// when called (a recording getenv), and every variable-shaped literal of the
// package, for the ones it reads only under a condition.
func configVars(t *testing.T) []string {
	t.Helper()
	seen := goStrings(t, false, envName.MatchString, "internal/config")
	_, _ = config.Load(func(name string) string { seen[name] = true; return "" })
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) < 30 {
		t.Fatalf("config reads %d variables? %v", len(names), names)
	}
	return names
}

func TestEveryConfigVariableIsDocumented(t *testing.T) {
	b, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range configVars(t) {
		if !strings.Contains(string(b), "`"+n+"`") {
			t.Errorf("docs/configuration.md does not document %s, which internal/config reads", n)
		}
	}
}

// sdkVars are read by the OpenTelemetry SDK itself, not by our code; the
// docs name them because they apply.
var sdkVars = map[string]bool{
	"OTEL_SERVICE_NAME": true, "OTEL_RESOURCE_ATTRIBUTES": true, "OTEL_TRACES_SAMPLER": true,
	"OTEL_EXPORTER_OTLP_HEADERS": true, "OTEL_SDK_DISABLED": true,
	// Not variables: the codes of Envoy's rate limit and gRPC health protocols.
	"OVER_LIMIT": true, "NOT_SERVING": true,
}

var docEnvRef = regexp.MustCompile(`\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b`)

func TestEveryVariableTheDocsNameExists(t *testing.T) {
	known := goStrings(t, true, envName.MatchString, "internal", "cmd", "limiter", "web", "api", "deploy", "examples")
	for _, f := range []string{"Makefile", "scripts/run.sh", "scripts/services.sh", ".ci/run", "docker-compose.yml"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range docEnvRef.FindAllString(string(b), -1) {
			known[n] = true
		}
	}
	for page, text := range docPages(t) {
		for _, n := range docEnvRef.FindAllString(text, -1) {
			if strings.HasSuffix(n, "_") || sdkVars[n] || known[n] {
				continue
			}
			t.Errorf("%s names %s, which no code, script or compose file reads", page, n)
		}
	}
}

// routeSegments are the first path segments Tollgate serves; a path the
// docs write under one of them must be a route.
var routeSegments = []string{"v1", "admin", "dashboard", "service", "webhooks", "healthz", "readyz", "metrics", "openapi.yaml", "static", "favicon.ico"}

// notOurs are paths the docs write that belong to someone else.
var notOurs = map[string]bool{
	"/v1/exports":        true, // docs/envoy.md: the backend's own route behind Envoy
	"/webhooks/tollgate": true, // docs/webhooks.md: examples/backend's receiver, not a Tollgate route
}

var (
	docRoute   = regexp.MustCompile("(?:`(?:(?:GET|POST|PUT|PATCH|DELETE|HEAD) )?|127\\.0\\.0\\.1:8080)(/[A-Za-z0-9_.{}:*/$-]*)")
	paramPart  = regexp.MustCompile(`^(\{[^}]+\}|:[A-Za-z_]+|\$[A-Za-z_]+|evt_123|price_[a-z_]+)$`)
	echoRoute  = regexp.MustCompile(`\.(?:GET|POST|PUT|PATCH|DELETE)\("(/[^"]*)"`)
	openAPIKey = regexp.MustCompile(`\{[^}]+\}`)
)

// servedRoutes lists every path the api serves, each segment a parameter
// written "*": the OpenAPI document's paths (the API, which a test in
// internal/httpapi keeps equal to the echo routes) and the routes web
// registers (the pages, outside the API document).
func servedRoutes(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "api", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var routes []string
	for p := range doc.Paths {
		routes = append(routes, openAPIKey.ReplaceAllString(p, "*"))
	}
	for _, dir := range []string{"web", "internal/httpapi"} {
		files, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range echoRoute.FindAllStringSubmatch(string(src), -1) {
				routes = append(routes, regexp.MustCompile(`:[A-Za-z_]+`).ReplaceAllString(m[1], "*"))
			}
		}
	}
	if len(routes) < 60 {
		t.Fatalf("found %d routes", len(routes))
	}
	return routes
}

// served reports whether path (parameters normalised to "*") is a route or,
// ending in "/*" as in "/admin/v1/*", the prefix of one.
func served(path string, routes []string) bool {
	for _, r := range routes {
		if r == path || r == strings.TrimSuffix(path, "/") {
			return true
		}
		if p, ok := strings.CutSuffix(path, "/*"); ok && strings.HasPrefix(r, p+"/") {
			return true
		}
		if strings.HasSuffix(r, "/*") && strings.HasPrefix(path, strings.TrimSuffix(r, "*")) && r == "/static/*" {
			return true
		}
	}
	return false
}

func TestEveryRouteTheDocsNameIsServed(t *testing.T) {
	routes := servedRoutes(t)
	checked := 0
	for page, text := range docPages(t) {
		for _, m := range docRoute.FindAllStringSubmatch(text, -1) {
			parts := strings.Split(strings.TrimSuffix(m[1], "."), "/")[1:]
			if len(parts) == 0 || !slices.Contains(routeSegments, parts[0]) {
				continue
			}
			for i, p := range parts {
				if paramPart.MatchString(p) {
					parts[i] = "*"
				}
			}
			path := "/" + strings.Join(parts, "/")
			if notOurs[path] {
				continue
			}
			checked++
			if !served(path, routes) {
				t.Errorf("%s names the route %s, which neither api/openapi.yaml nor the echo routes serve", page, m[1])
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d routes: the pattern no longer finds them", checked)
	}
}

var docTest = regexp.MustCompile(`\b(?:Test|Benchmark)[A-Z][A-Za-z0-9_]*`)

func TestEveryTestTheDocsNameExists(t *testing.T) {
	funcs := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && strings.HasPrefix(e.Name(), ".") && p != root {
			return filepath.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range regexp.MustCompile(`(?m)^func ((?:Test|Benchmark)\w+)\(`).FindAllStringSubmatch(string(b), -1) {
				funcs[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pages := docPages(t)
	b, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages["BENCHMARKS.md"] = string(b)
	for page, text := range pages {
		for _, n := range docTest.FindAllString(text, -1) {
			if !funcs[n] && !funcs[strings.SplitN(n, "/", 2)[0]] {
				t.Errorf("%s names %s, which is no test or benchmark function", page, n)
			}
		}
	}
}
