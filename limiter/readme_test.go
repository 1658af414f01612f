package limiter_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goBlocks returns the ```go blocks of a Markdown file, in order.
func goBlocks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestREADMESnippetsCompile builds the backend setup snippets of
// limiter/README.md and docs/limiter.md, and limiter/README.md's metrics hooks, as
// the bodies of functions: a snippet that uses a name before defining it, or
// drops an error, fails here and not in a reader's editor.
func TestREADMESnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet")
	}
	var funcs []string
	add := func(name, body string) {
		funcs = append(funcs, "func "+name+"(ctx context.Context, mux *http.ServeMux) error {\n"+body+"\n}\n")
	}
	setup := func(blocks []string) string {
		for _, b := range blocks {
			if strings.Contains(b, "remote.New(") && strings.Contains(b, "limithttp.Middleware(") {
				return b
			}
		}
		t.Fatal("no setup snippet (remote.New and limithttp.Middleware)")
		return ""
	}
	lim := goBlocks(t, "README.md")
	for name, b := range map[string]string{"limiter/README.md": setup(lim), "docs/limiter.md": setup(goBlocks(t, "../docs/limiter.md"))} {
		// A backend beside `make run` must not take Tollgate's own port,
		// and must not drop ListenAndServe's error (it exited 0 at once).
		if regexp.MustCompile(`ListenAndServe\("[^"]*:8080"`).MatchString(b) || !strings.Contains(b, "return http.ListenAndServe(") {
			t.Errorf("%s: the setup snippet listens on Tollgate's port or drops ListenAndServe's error:\n%s", name, b)
		}
	}
	add("limiterREADMESetup", setup(lim))
	add("rootREADMESetup", setup(goBlocks(t, "../docs/limiter.md")))
	for _, b := range lim {
		if strings.Contains(b, "hooks := limiter.Hooks{") {
			add("limiterREADMEHooks", b+"\n_ = hooks\nreturn nil")
		}
	}
	if len(funcs) != 3 {
		t.Fatalf("found %d of the 3 snippets", len(funcs))
	}
	src := `package readme

import (
	"context"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
	"github.com/tollgatehq/tollgate/limiter/remote"
)

var (
	_ = os.Getenv
	_ = prometheus.NewCounterVec
	_ = redis.NewClient
	_ context.Context
	_ = limithttp.Middleware
	_ = remote.New
)

` + strings.Join(funcs, "\n")
	// Inside the module, so that the imports resolve from go.mod; the dot
	// keeps it out of ./... while it exists.
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, ".readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "readme.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "vet", "./"+filepath.Base(dir))
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the README snippets do not build: %v\n%s\n%s", err, out.String(), src)
	}
}
