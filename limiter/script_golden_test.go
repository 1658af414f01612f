package limiter

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var updateScripts = flag.Bool("update", false, "rewrite testdata/scripts from the assembled scripts")

// TestScriptsMatchGolden keeps the scripts Redis runs in view: each
// assembled script is committed under testdata/scripts, so that a change to
// a fragment shows in review as the change to what Redis runs, and a
// "user_script:N" error can be traced to line N of the golden file. Run with
// -update after changing a fragment in lua/.
func TestScriptsMatchGolden(t *testing.T) {
	scripts := map[string]string{
		"decide.lua":      decideLua,
		"fast.lua":        fastLua,
		"fast_grants.lua": fastGrantsBody,
		"ref.lua":         refLua,
		"fast_ref.lua":    fastRefBody,
		"put_limits.lua":  putLimLua,
		"seed.lua":        seedLua,
		"rebase.lua":      rebaseLua,
		"settle.lua":      settleLua,
	}
	dir := filepath.Join("testdata", "scripts")
	if *updateScripts {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range scripts {
		path := filepath.Join(dir, name)
		if *updateScripts {
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run go test -run TestScriptsMatchGolden -update)", name, err)
		}
		if string(want) != src {
			t.Errorf("assembled %s differs from %s (run go test -run TestScriptsMatchGolden -update and review the diff)", name, path)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := scripts[e.Name()]; !ok {
			t.Errorf("%s: no assembled script has this name; remove it", filepath.Join(dir, e.Name()))
		}
	}
}
