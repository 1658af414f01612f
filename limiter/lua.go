package limiter

import (
	"embed"
	"fmt"
	"regexp"
)

// The Lua that Redis runs lives in lua/*.lua, so that a reviewer reads Lua,
// not Go strings. Some fragments are shared by several scripts (decide()
// and count_refusal are defined inline where they are called: a closure
// made on every call is a cost) and some take parameters ($NAME, replaced
// by the Go that assembles them in script.go). {{name}} marks where another
// fragment goes. The assembled scripts are committed in
// testdata/scripts (TestScriptsMatchGolden), which is where a
// "user_script:N" error's line N is found.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// luaFragment returns lua/<name>.lua as written.
func luaFragment(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		// only a fragment missing from the embedded files: a bug caught by
		// any test, as the scripts are assembled at init
		panic(fmt.Sprintf("limiter: Lua fragment %s: %v", name, err))
	}
	return string(b)
}

var luaToken = regexp.MustCompile(`\{\{([a-z_]+)\}\}`)

// luaFill returns fragment name with each {{part}} replaced by parts[part].
func luaFill(name string, parts map[string]string) string {
	return fillParts(name, luaFragment(name), parts)
}

// fillParts replaces each {{part}} of src (fragment name, for the message)
// by parts[part]; a token without a part panics at init. What is put in is
// not scanned again.
func fillParts(name, src string, parts map[string]string) string {
	return luaToken.ReplaceAllStringFunc(src, func(tok string) string {
		p, ok := parts[tok[2:len(tok)-2]]
		if !ok {
			panic(fmt.Sprintf("limiter: Lua fragment %s: no part for %s", name, tok))
		}
		return p
	})
}
