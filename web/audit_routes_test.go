package web

import (
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/audit"
)

// TestEveryMutatingAdminRouteIsDeclared: every POST, PUT, PATCH and DELETE
// of the admin API and the console is declared in audit.Routes (or says in
// audit.Unaudited why it records nothing), and every declaration is a
// served route, so that no admin action goes unrecorded by a route that
// was added without one and no declaration outlives its route.
func TestEveryMutatingAdminRouteIsDeclared(t *testing.T) {
	t.Parallel()
	b := setup(t)
	served := map[string]bool{}
	for _, r := range b.api.Echo().Routes() {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			continue
		}
		if !strings.HasPrefix(r.Path, "/admin") || strings.HasSuffix(r.Path, "/*") {
			continue
		}
		k := r.Method + " " + r.Path
		served[k] = true
		_, declared := audit.Routes[k]
		_, exempt := audit.Unaudited[k]
		if !declared && !exempt {
			t.Errorf("%s changes something and is not declared in audit.Routes (nor audit.Unaudited)", k)
		}
	}
	var gone []string
	for k := range audit.Routes {
		if !served[k] {
			gone = append(gone, k)
		}
	}
	for k := range audit.Unaudited {
		if !served[k] {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	if len(gone) > 0 {
		t.Errorf("declared but not served: %s", strings.Join(gone, ", "))
	}
}
