package limiter_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// moduleAPI returns the exported names of every package of the limiter
// module: "pkg.Name" for its functions, types, constants and variables,
// "Type.Member" for methods and struct fields (and "pkg.Type.Member"), and
// the comments of its non-test Go files, by file.
func moduleAPI(t *testing.T) (names map[string]bool, types map[string]bool, comments map[string]string) {
	t.Helper()
	names, types, comments = map[string]bool{}, map[string]bool{}, map[string]string{}
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" || (strings.HasPrefix(d.Name(), ".") && dir != ".") {
			return filepath.SkipDir
		}
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, p := range pkgs {
			for name, f := range p.Files {
				var b strings.Builder
				for _, cg := range f.Comments {
					b.WriteString(cg.Text())
				}
				comments[name] = b.String()
			}
			dp := doc.New(p, p.Name, 0)
			add := func(n string) { names[p.Name+"."+n] = true }
			for _, c := range append(dp.Consts, dp.Vars...) {
				for _, n := range c.Names {
					add(n)
				}
			}
			for _, f := range dp.Funcs {
				add(f.Name)
			}
			for _, ty := range dp.Types {
				add(ty.Name)
				types[ty.Name] = true
				member := func(m string) { names[ty.Name+"."+m] = true; add(ty.Name + "." + m) }
				for _, c := range append(ty.Consts, ty.Vars...) {
					for _, n := range c.Names {
						add(n)
					}
				}
				for _, f := range ty.Funcs {
					add(f.Name)
				}
				for _, m := range ty.Methods {
					member(m.Name)
				}
				for _, s := range ty.Decl.Specs {
					if st, ok := s.(*ast.TypeSpec).Type.(*ast.StructType); ok {
						for _, f := range st.Fields.List {
							for _, n := range f.Names {
								if n.IsExported() {
									member(n.Name)
								}
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names, types, comments
}

// modulePackages are the package names of the module, as docs qualify
// identifiers with them.
var modulePackages = map[string]bool{"limiter": true, "limithttp": true, "remote": true, "keyspace": true,
	"limitertest": true, "redisproc": true, "tgserver": true}

// qualified matches Pkg.Name, Type.Member and Pkg.Type.Member.
var qualified = regexp.MustCompile(`\b([a-z]+|[A-Z][A-Za-z0-9]*)\.([A-Z][A-Za-z0-9]*)(?:\.([A-Z][A-Za-z0-9]*))?`)

// TestDocsNameWhatExists: every identifier the limiter's READMEs, its page
// in docs/ and its Go doc comments name (qualified by one of the module's
// packages or types) exists, so a rename cannot leave docs naming
// something gone (doc.go named RemoteLoaders long after it became
// NewRemote). Identifiers of other packages (redis.Options, http.Header)
// are not checked.
func TestDocsNameWhatExists(t *testing.T) {
	names, types, comments := moduleAPI(t)
	if len(names) < 100 || !names["limiter.New"] || !names["Options.Prefetch"] || !names["limithttp.Middleware"] {
		t.Fatalf("found %d names: the walk no longer sees the module", len(names))
	}
	texts := map[string]string{}
	for _, p := range []string{"README.md", "../docs/limiter.md"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		texts[p] = string(b)
	}
	for f, c := range comments {
		texts[f] = c
	}
	checked := 0
	for page, text := range texts {
		for _, m := range qualified.FindAllStringSubmatch(text, -1) {
			x, y, z := m[1], m[2], m[3]
			if !modulePackages[x] && !types[x] {
				continue // another package's (redis.Options) or prose
			}
			if modulePackages[x] && !strings.Contains(text, x+".") {
				continue
			}
			name := x + "." + y
			if z != "" && (modulePackages[x] || types[x]) {
				if modulePackages[x] {
					name = x + "." + y + "." + z
				} else if !types[y] { // Type.Field.Member: check the field
					name = x + "." + y
				}
			}
			checked++
			if !names[name] && !names[x+"."+y] {
				t.Errorf("%s names %s, which the limiter module does not export", page, m[0])
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d names: the pattern no longer finds them", checked)
	}
}
