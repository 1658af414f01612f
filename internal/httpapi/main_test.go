package httpapi

import (
	"testing"

	"github.com/tollgatehq/tollgate/internal/pgtest"
)

// TestMain gives the package's tests their own database (every test file of
// the package shares it; keep this the only TestMain here).
func TestMain(m *testing.M) { pgtest.Main(m) }
