package limiter_test

import (
	"os/exec"
	"strings"
	"testing"
)

const limiterPkg = "github.com/tollgatehq/tollgate/limiter"

// goListDeps returns the non-standard packages pkg depends on (itself
// included).
func goListDeps(t *testing.T, pkg string, flags ...string) []string {
	t.Helper()
	args := append([]string{"list", "-deps"}, flags...)
	out, err := exec.Command("go", append(args, "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// badDeps returns what of deps the limiter may not import: anything but
// itself (and its own subpackages), go-redis with whatever go-redis itself
// depends on (redisDeps, so that tracking go-redis's latest release never
// needs a pin), and golang.org/x/{time,sync}. Another Tollgate package is
// always refused, even if go-redis somehow listed it.
func badDeps(deps, redisDeps []string) []string {
	allowed := map[string]bool{}
	for _, p := range redisDeps {
		allowed[p] = true
	}
	var bad []string
	for _, p := range deps {
		switch {
		case p == limiterPkg, strings.HasPrefix(p, limiterPkg+"/"):
		case strings.HasPrefix(p, "github.com/tollgatehq/"):
			bad = append(bad, p)
		case allowed[p],
			strings.HasPrefix(p, "golang.org/x/time/"),
			strings.HasPrefix(p, "golang.org/x/sync/"):
		default:
			bad = append(bad, p)
		}
	}
	return bad
}

// TestDependencies keeps the packages of the limiter module importable on
// their own: the standard library, go-redis and its own dependencies, and
// golang.org/x/{time,sync}. Their tests too (-test): the limiter's tests
// run with none of Tollgate's packages (limitertest stands in).
func TestDependencies(t *testing.T) {
	redisDeps := goListDeps(t, "github.com/redis/go-redis/v9")
	for _, p := range badDeps(goListDeps(t, limiterPkg+"/..."), redisDeps) {
		t.Errorf("the limiter module depends on %s", p)
	}
	for _, p := range badDeps(goListDeps(t, limiterPkg+"/...", "-test"), redisDeps) {
		if !strings.HasSuffix(p, ".test") && !strings.HasSuffix(p, "_test") && !strings.HasSuffix(p, "]") {
			t.Errorf("the limiter module's tests depend on %s", p)
		}
	}
}

// TestDependencyRule checks the rule itself: go-redis's dependencies pass,
// Tollgate packages and unrelated modules do not.
func TestDependencyRule(t *testing.T) {
	redisDeps := []string{"github.com/redis/go-redis/v9", "go.uber.org/atomic", "golang.org/x/sys/cpu"}
	deps := []string{limiterPkg, limiterPkg + "/limithttp", "github.com/redis/go-redis/v9", "go.uber.org/atomic",
		"golang.org/x/sys/cpu", "golang.org/x/sync/singleflight", "golang.org/x/time/rate",
		"github.com/tollgatehq/tollgate/internal/ids", "github.com/labstack/echo/v4"}
	got := badDeps(deps, redisDeps)
	want := []string{"github.com/tollgatehq/tollgate/internal/ids", "github.com/labstack/echo/v4"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("badDeps = %v, want %v", got, want)
	}
}
