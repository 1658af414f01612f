package web

import (
	"testing"
	"time"
)

// Expired links and sessions go once they are a day past their expiry (the
// worker's retention job); younger ones, expired or not, stay.
func TestExpiredLinksAndSessionsArePruned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Prune", b.free)
	now := time.Now().UTC()
	ages := map[string]time.Duration{"old": -48 * time.Hour, "fresh": -time.Hour, "live": time.Hour}
	for name, d := range ages {
		if _, err := b.pool.Exec(b.ctx, `INSERT INTO dashboard_links (token_hash, tenant_id, expires_at) VALUES ($1, $2, $3)`,
			hashToken(name+tn.ID), tn.ID, now.Add(d)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.pool.Exec(b.ctx, `INSERT INTO web_sessions (id_hash, kind, tenant_id, csrf_token, expires_at) VALUES ($1, 'tenant', $2, 'csrf', $3)`,
			hashToken("s"+name+tn.ID), tn.ID, now.Add(d)); err != nil {
			t.Fatal(err)
		}
	}
	e := NewExpired(b.pool)
	cutoff := now.Add(-24 * time.Hour)
	nl, err := e.PruneLinks(b.ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := e.PruneSessions(b.ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if nl < 1 || ns < 1 {
		t.Fatalf("pruned %d links and %d sessions, want at least this test's old ones", nl, ns)
	}
	for name := range ages {
		var links, sessions int
		_ = b.pool.QueryRow(b.ctx, `SELECT count(*) FROM dashboard_links WHERE token_hash = $1`, hashToken(name+tn.ID)).Scan(&links)
		_ = b.pool.QueryRow(b.ctx, `SELECT count(*) FROM web_sessions WHERE id_hash = $1`, hashToken("s"+name+tn.ID)).Scan(&sessions)
		want := 1
		if name == "old" {
			want = 0
		}
		if links != want || sessions != want {
			t.Errorf("%s: %d links and %d sessions left, want %d", name, links, sessions, want)
		}
	}
}
