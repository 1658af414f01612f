package postgres_test

import (
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// Open sizes the pool as DATABASE_MAX_CONNS says (it was pgx's max(4,
// NumCPU), whatever the operator wanted); 0 keeps the URL's pool_max_conns.
func TestOpenSizesThePool(t *testing.T) {
	url := pgtest.BaseURL()
	pool, err := postgres.Open(t.Context(), url, 7)
	if err != nil {
		testkit.Unavailable(t, "postgres", err)
	}
	defer pool.Close()
	if got := pool.Config().MaxConns; got != 7 {
		t.Errorf("MaxConns = %d, want 7", got)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	pool2, err := postgres.Open(t.Context(), url+sep+"pool_max_conns=3", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pool2.Close()
	if got := pool2.Config().MaxConns; got != 3 {
		t.Errorf("MaxConns with pool_max_conns=3 and no DATABASE_MAX_CONNS = %d, want 3", got)
	}
}
