package api_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	// The generated client imports these. Importing them here keeps them in
	// go.mod and go.sum (go mod tidy would drop them otherwise), so the
	// generated package builds against the module's pinned dependencies.
	_ "github.com/oapi-codegen/runtime"
	_ "github.com/oapi-codegen/runtime/types"
)

// TestGoClientCompiles generates a Go client from openapi.yaml with the
// oapi-codegen pinned as a tool in go.mod, and builds and vets it. A spec whose
// names collide once generated (operation "check" gave CheckResponse, which is
// also a schema) fails here instead of in a customer's build.
func TestGoClientCompiles(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	// The package must live inside the module so that its imports resolve from
	// go.mod; a leading dot keeps it out of ./... patterns while it exists.
	dir, err := os.MkdirTemp(root, ".tgclient-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	// The README's commands, as a reader pastes them (into a folder that
	// does not exist yet: the mkdir must be there), with tgclient renamed to
	// this test's folder.
	readme, err := os.ReadFile(filepath.Join(root, "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sh\n(mkdir[^`]*?go tool oapi-codegen[^`]*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("docs/api.md: no ```sh block with mkdir and go tool oapi-codegen")
	}
	sub := filepath.Join(filepath.Base(dir), "tgclient")
	script := strings.ReplaceAll(string(m[1]), "tgclient/", sub+"/")
	script = strings.ReplaceAll(script, "mkdir -p tgclient", "mkdir -p "+sub)
	gen := exec.Command("bash", "-euc", script)
	gen.Dir = root
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("the README's oapi-codegen commands: %v\n%s\n%s", err, script, out)
	}
	pkg := "./" + sub
	for _, args := range [][]string{
		{"build", "-o", os.DevNull, pkg},
		{"vet", pkg},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("go %s on the generated client: %v\n%s", args[0], err, out.String())
		}
	}
}
