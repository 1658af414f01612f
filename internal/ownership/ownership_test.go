package ownership

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// debts are cross-owner queries allowed for now, each with why it is still
// there (package → table → reason). Issue 24 emptied the list: every
// package reads and writes other packages' tables only through their owner.
// The test fails on any query not listed here and on a listed one that is
// gone, so an entry added must say why and leave again.
var debts = map[string]map[string]string{}

// tableRef finds the table a statement reads or writes after FROM, JOIN,
// INTO, UPDATE, TABLE or TRUNCATE; names that are not tables (unnest, a
// subquery's alias) are dropped by the caller.
var tableRef = regexp.MustCompile(`(?i)\b(?:from|join|into|update|table|truncate)\s+(?:only\s+)?([a-z_][a-z0-9_]*)`)

// ref is one table named by one package.
type ref struct {
	pkg, table, at string
}

// refs lists the known tables named in src's string literals (a Go file)
// or in src itself (a .sql file), for package pkg.
func refs(pkg, name string, src []byte, tables map[string]bool) ([]ref, error) {
	var texts []string
	var lines []int
	if strings.HasSuffix(name, ".sql") {
		texts, lines = []string{string(src)}, []int{1}
	} else {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if bl, ok := n.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				if s, err := strconv.Unquote(bl.Value); err == nil {
					texts, lines = append(texts, s), append(lines, fset.Position(bl.Pos()).Line)
				}
			}
			return true
		})
	}
	var out []ref
	for i, s := range texts {
		for _, m := range tableRef.FindAllStringSubmatch(s, -1) {
			if t := strings.ToLower(m[1]); tables[t] {
				out = append(out, ref{pkg: pkg, table: t, at: name + ":" + strconv.Itoa(lines[i])})
			}
		}
	}
	return out, nil
}

// owners reads the owners table of docs/development.md: package → tables,
// and the views any package may read (marked "any package may read").
func owners(t *testing.T, root string) (map[string][]string, map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([a-z/]+)` \\| (.+) \\|$")
	item := regexp.MustCompile(`([a-z_][a-z0-9_]*)\s*(\([^)]*\))?\s*(,|$)`)
	out, public := map[string][]string{}, map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		m := row.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		for _, it := range item.FindAllStringSubmatch(m[2], -1) {
			out[m[1]] = append(out[m[1]], it[1])
			if strings.Contains(it[2], "any package may read") {
				public[it[1]] = true
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/development.md: no owners table (| `package` | tables |)")
	}
	return out, public
}

var createTable = regexp.MustCompile(`(?i)create\s+(?:unlogged\s+)?(?:table|(?:or\s+replace\s+)?view)\s+(?:if\s+not\s+exists\s+)?([a-z_][a-z0-9_]*)`)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found from %s: %v", root, err)
	}
	return root
}

// scan walks the repository's packages (not migrations, test files or
// testdata) and returns every reference to a known table.
func scan(t *testing.T, root string, tables map[string]bool) []ref {
	t.Helper()
	var out []ref
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case p == root:
			case name == "migrations" || name == "testdata" || name == "node_modules" || strings.HasPrefix(name, "."):
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, "_test.go") || !(strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".sql")) {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rs, err := refs(filepath.ToSlash(filepath.Dir(rel)), filepath.ToSlash(rel), src, tables)
		out = append(out, rs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// violations are the references of a package to a table it does not own
// (a public view is read by anyone; only its owner may change it). An
// owner's subpackages are the owner (web/expired prunes web's tables apart
// from the console so that the worker need not import it).
func violations(rs []ref, ownerOf map[string]string, public map[string]bool) []ref {
	var out []ref
	for _, r := range rs {
		if o := ownerOf[r.table]; o != r.pkg && !strings.HasPrefix(r.pkg, o+"/") && !public[r.table] {
			out = append(out, r)
		}
	}
	return out
}

func ownerIndex(t *testing.T, own map[string][]string) map[string]string {
	t.Helper()
	ownerOf := map[string]string{}
	for pkg, ts := range own {
		for _, tb := range ts {
			if prev, ok := ownerOf[tb]; ok {
				t.Errorf("docs/development.md: table %s has two owners, %s and %s", tb, prev, pkg)
			}
			ownerOf[tb] = pkg
		}
	}
	return ownerOf
}

func TestEveryPackageQueriesOnlyTheTablesItOwns(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	own, public := owners(t, root)
	ownerOf := ownerIndex(t, own)
	tables := map[string]bool{}
	for tb := range ownerOf {
		tables[tb] = true
	}
	// Every table a migration creates has an owner, and every owned name
	// is a table a migration creates (River makes its own).
	created := map[string]bool{}
	defer func() {
		for tb := range ownerOf {
			if !created[tb] && !strings.HasPrefix(tb, "river_") {
				t.Errorf("docs/development.md: %s has an owner but no migration creates it", tb)
			}
		}
	}()
	migs, _ := filepath.Glob(filepath.Join(root, "migrations", "*.sql"))
	for _, m := range migs {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range createTable.FindAllStringSubmatch(string(b), -1) {
			tb := strings.ToLower(c[1])
			created[tb] = true
			if !tables[tb] {
				t.Errorf("%s creates table %s, which has no owner in docs/development.md", filepath.Base(m), tb)
				tables[tb] = true
			}
		}
	}
	seen := map[string]map[string]bool{}
	for _, v := range violations(scan(t, root, tables), ownerOf, public) {
		if seen[v.pkg] == nil {
			seen[v.pkg] = map[string]bool{}
		}
		seen[v.pkg][v.table] = true
		if _, known := debts[v.pkg][v.table]; !known {
			t.Errorf("%s: package %s queries %s, which %s owns: call the owner's function instead", v.at, v.pkg, v.table, ownerOf[v.table])
		}
	}
	var stale []string
	for pkg, ts := range debts {
		for tb := range ts {
			if !seen[pkg][tb] {
				stale = append(stale, pkg+" → "+tb)
			}
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("debts no longer needed, remove them: %s", strings.Join(stale, ", "))
	}
}

// TestOwnershipCheckCatchesACrossOwnerQuery proves the check on sources
// written for it: a web file that reads billing's events, a split SQL
// fragment, a .sql file, and queries the owner may run.
func TestOwnershipCheckCatchesACrossOwnerQuery(t *testing.T) {
	t.Parallel()
	ownerOf := map[string]string{"stripe_events": "internal/billing", "tenants": "internal/entitlements", "web_sessions": "web", "open_view": "internal/entitlements"}
	tables := map[string]bool{"stripe_events": true, "tenants": true, "web_sessions": true, "open_view": true}
	cases := []struct {
		pkg, name, src string
		want           []string // tables named out of place
	}{
		{"web", "web/x.go", "package web\nconst q = `SELECT id FROM stripe_events WHERE id = $1`\n", []string{"stripe_events"}},
		{"web", "web/x.go", "package web\nvar q = \"SELECT e.id\" + \" FROM stripe_events e LEFT JOIN tenants t ON t.id = e.tenant_id\"\n", []string{"stripe_events", "tenants"}},
		{"web", "web/x.go", "package web\nconst q = `DELETE FROM web_sessions WHERE expires_at < now()`\n", nil},
		{"web", "web/q.sql", "update tenants set name = 'x';\n", []string{"tenants"}},
		{"internal/billing", "internal/billing/x.go", "package billing\nconst q = `INSERT INTO stripe_events (id) VALUES ($1)`\n", nil},
		{"web", "web/x.go", "package web\nconst msg = \"nothing from the events page\"\n", nil},
		{"internal/metering", "internal/metering/x.go", "package metering\nconst q = `SELECT id FROM open_view WHERE tenant_id = $1`\n", nil},
	}
	for _, c := range cases {
		rs, err := refs(c.pkg, c.name, []byte(c.src), tables)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, v := range violations(rs, ownerOf, map[string]bool{"open_view": true}) {
			got = append(got, v.table)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s %q: out of place %v, want %v", c.pkg, c.src, got, c.want)
		}
	}
}
