package main

import (
	"go/build"
	"strings"
	"testing"
)

// TestWorkerDoesNotImportTheAPI: the worker serves its metrics through
// internal/serve; the API package (echo, every handler) is not part of it,
// directly or through another of our packages.
func TestWorkerDoesNotImportTheAPI(t *testing.T) {
	t.Parallel()
	const module = "github.com/tollgatehq/tollgate/"
	forbidden := map[string]bool{module + "internal/httpapi": true, module + "web": true}
	seen := map[string]bool{}
	var walk func(path, dir string, from []string)
	walk = func(path, dir string, from []string) {
		if seen[path] {
			return
		}
		seen[path] = true
		if forbidden[path] {
			t.Errorf("cmd/worker imports %s (through %s)", path, strings.Join(from, " → "))
			return
		}
		p, err := build.Import(path, dir, 0)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				walk(imp, p.Dir, append(from, imp))
			}
		}
	}
	walk(module+"cmd/worker", ".", []string{"cmd/worker"})
}
