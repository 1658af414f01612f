package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// limiterPages are the limiter module's READMEs and the doc comments of its
// Go files (the pages of pkg.go.dev a backend reads), by file.
func limiterPages(t *testing.T) map[string]string {
	t.Helper()
	pages := map[string]string{}
	err := filepath.WalkDir(filepath.Join(root, "limiter"), func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "testdata":
			return filepath.SkipDir
		case strings.HasSuffix(path, ".md"):
			b, err := os.ReadFile(path)
			pages[path] = string(b)
			return err
		case strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go"):
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			var b strings.Builder
			for _, cg := range f.Comments {
				b.WriteString(cg.Text())
			}
			pages[path] = b.String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// commentRoute is a route as comments write it: a method, then the path.
var commentRoute = regexp.MustCompile(`\b(?:GET|POST|PUT|PATCH|DELETE|HEAD) (/[A-Za-z0-9_.{}:*/$-]*)`)

// TestEveryRouteTheLimiterDocsNameIsServed: the limiter's READMEs and doc
// comments name only routes Tollgate serves (types.go named a
// GET /v1/internal/snapshots/{tenant} that never existed).
func TestEveryRouteTheLimiterDocsNameIsServed(t *testing.T) {
	routes := servedRoutes(t)
	checked := 0
	for page, text := range limiterPages(t) {
		var found []string
		for _, m := range docRoute.FindAllStringSubmatch(text, -1) {
			found = append(found, m[1])
		}
		for _, m := range commentRoute.FindAllStringSubmatch(text, -1) {
			found = append(found, m[1])
		}
		for _, r := range found {
			parts := strings.Split(strings.TrimRight(r, ".,;:)"), "/")[1:]
			if len(parts) == 0 || !slices.Contains(routeSegments, parts[0]) {
				continue
			}
			for i, p := range parts {
				if paramPart.MatchString(p) {
					parts[i] = "*"
				}
			}
			path := "/" + strings.Join(parts, "/")
			checked++
			if !served(path, routes) {
				t.Errorf("%s names the route %s, which neither api/openapi.yaml nor the echo routes serve", page, r)
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d routes: the patterns no longer find them", checked)
	}
}
