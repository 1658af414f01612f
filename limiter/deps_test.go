package limiter_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the package importable on its own: the standard
// library, go-redis (with what go-redis itself needs) and golang.org/x/{time,sync}.
func TestDependencies(t *testing.T) {
	list := func(pkg string) map[string]bool {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		m := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			m[p] = true
		}
		return m
	}
	redisDeps := list("github.com/redis/go-redis/v9")
	for p := range list("github.com/tollgatehq/tollgate/limiter") {
		switch {
		case p == "github.com/tollgatehq/tollgate/limiter",
			strings.HasPrefix(p, "github.com/redis/go-redis/v9"),
			strings.HasPrefix(p, "golang.org/x/time/"),
			strings.HasPrefix(p, "golang.org/x/sync/"),
			redisDeps[p]:
		default:
			t.Errorf("limiter depends on %s", p)
		}
	}
}
