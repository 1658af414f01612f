package api_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
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

	gen := exec.Command("go", "tool", "oapi-codegen",
		"-generate", "types,client", "-package", "tgclient",
		"-o", filepath.Join(dir, "client.gen.go"), "api/openapi.yaml")
	gen.Dir = root
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, out)
	}

	pkg := "./" + filepath.Base(dir)
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
