package limiter_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the package importable on its own: the standard
// library, go-redis (with only the two small modules it has long needed) and
// golang.org/x/{time,sync}. The list is explicit on purpose: a go-redis
// upgrade that drags in more (v9.19+ imports go.uber.org/atomic and
// golang.org/x/sys) must fail here, not slip in.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/tollgatehq/tollgate/limiter").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == "github.com/tollgatehq/tollgate/limiter",
			strings.HasPrefix(p, "github.com/redis/go-redis/v9"),
			strings.HasPrefix(p, "github.com/cespare/xxhash/"),
			strings.HasPrefix(p, "github.com/dgryski/go-rendezvous"),
			strings.HasPrefix(p, "golang.org/x/time/"),
			strings.HasPrefix(p, "golang.org/x/sync/"):
		default:
			t.Errorf("limiter depends on %s", p)
		}
	}
}
