package billing_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Billing writes tenants only through entitlements.WriteAndPublish (issue 13): no
// SQL in this package updates, inserts into or deletes from tenants.
func TestBillingWritesNoTenantsColumns(t *testing.T) {
	t.Parallel()
	write := regexp.MustCompile(`(?i)(update\s+tenants\b|insert\s+into\s+tenants\b|delete\s+from\s+tenants\b)`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		if m := write.Find(b); m != nil {
			t.Errorf("%s writes tenants directly (%q); use entitlements.WriteAndPublish's Writes", f, m)
		}
	}
	if checked < 5 {
		t.Fatalf("only %d source files checked", checked)
	}
}
