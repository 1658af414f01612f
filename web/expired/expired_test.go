package expired_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/web/expired"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// hashOf stands in for a token's hash: the key of a row, nothing more.
func hashOf(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// Expired links and sessions go once they are a day past their expiry (the
// worker's retention job); younger ones, expired or not, stay.
func TestExpiredLinksAndSessionsArePruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	ents := entitlements.NewService(db, limitstore.New(rdb, prefix), nil, entitlements.Options{})
	cat := catalogue.NewService(db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	plan := fmt.Sprintf("prune%d", time.Now().UnixNano())
	if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: plan, Name: plan}); err != nil {
		t.Fatal(err)
	}
	tn, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: "Prune", Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	ages := map[string]time.Duration{"old": -48 * time.Hour, "fresh": -time.Hour, "live": time.Hour}
	for name, d := range ages {
		if _, err := db.Exec(ctx, `INSERT INTO dashboard_links (token_hash, tenant_id, expires_at) VALUES ($1, $2, $3)`,
			hashOf(name+tn.ID), tn.ID, now.Add(d)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `INSERT INTO web_sessions (id_hash, kind, tenant_id, csrf_token, expires_at) VALUES ($1, 'tenant', $2, 'csrf', $3)`,
			hashOf("s"+name+tn.ID), tn.ID, now.Add(d)); err != nil {
			t.Fatal(err)
		}
	}
	e := expired.New(db)
	cutoff := now.Add(-24 * time.Hour)
	nl, err := e.PruneLinks(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := e.PruneSessions(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if nl < 1 || ns < 1 {
		t.Fatalf("pruned %d links and %d sessions, want at least this test's old ones", nl, ns)
	}
	for name := range ages {
		var links, sessions int
		_ = db.QueryRow(ctx, `SELECT count(*) FROM dashboard_links WHERE token_hash = $1`, hashOf(name+tn.ID)).Scan(&links)
		_ = db.QueryRow(ctx, `SELECT count(*) FROM web_sessions WHERE id_hash = $1`, hashOf("s"+name+tn.ID)).Scan(&sessions)
		want := 1
		if name == "old" {
			want = 0
		}
		if links != want || sessions != want {
			t.Errorf("%s: %d links and %d sessions left, want %d", name, links, sessions, want)
		}
	}
}
