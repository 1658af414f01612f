package web

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// "Used" has one definition (metering.Used, applied by metering's Usage)
// and every reader shows it: the console's tenant list and tenant page, the
// tenant's dashboard, the admin API and GET /v1/usage. The two meters are
// set up so that any other rule shows a different number: for requests the
// Redis counter is ahead of Postgres (a Postgres-only reader shows 40), for
// exports Postgres is ahead (a "Redis whenever present" reader shows 12).
func TestEveryReaderShowsTheSameUsed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Used once", b.pro)
	key := b.key(t, tn.ID)
	snap, err := b.ents.SnapshotFromPostgres(b.ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct {
		meter         string
		durable, live int64
	}{{"requests", 40, 57}, {"exports", 30, 12}} {
		if _, err := b.pool.Exec(b.ctx, `INSERT INTO usage_periods (tenant_id, meter, period_start, period_end, used) VALUES ($1, $2, $3, $4, $5)`,
			tn.ID, u.meter, snap.PeriodStart, snap.PeriodEnd, u.durable); err != nil {
			t.Fatal(err)
		}
		if err := b.rdb.HSet(b.ctx, b.store.Keys().State(tn.ID), keyspace.CounterOf(u.meter, snap.PeriodStart).Used(), u.live).Err(); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int64{"requests": 57, "exports": 30}

	// The console's tenant list shows the requests meter.
	admin := b.browser(t)
	wantRedirect(t, admin.loginAdmin(b.admin), "/admin/tenants", "admin login")
	list := admin.get("/admin/tenants?q=" + tn.ID)
	wantStatus(t, list, http.StatusOK, "tenant list")
	if got := regexp.MustCompile(`data-used="(\d+)"`).FindAllStringSubmatch(list.body, -1); len(got) != 1 || got[0][1] != "57" {
		t.Fatalf("tenant list: requests used %v, want [57]", got)
	}
	// The console's tenant page and the tenant's dashboard show every meter.
	page := admin.get("/admin/tenants/" + tn.ID)
	wantStatus(t, page, http.StatusOK, "tenant page")
	checkMeters(t, "tenant page", page.body, want)
	dash := b.browser(t)
	wantRedirect(t, dash.loginKey(key.Key), "/dashboard", "dashboard login")
	d := dash.get("/dashboard")
	wantStatus(t, d, http.StatusOK, "dashboard")
	checkMeters(t, "dashboard", d.body, want)

	// The admin API.
	var detail struct {
		Usage []struct {
			Meter  string
			Used   int64
			Source string
		}
	}
	if st := apiJSON(t, http.MethodGet, b.srv.URL+"/admin/v1/tenants/"+tn.ID, b.admin, "", &detail); st != http.StatusOK {
		t.Fatalf("admin tenant: %d", st)
	}
	wantSource := map[string]string{"requests": "redis", "exports": "postgres"}
	for _, m := range detail.Usage {
		if m.Used != want[m.Meter] || m.Source != wantSource[m.Meter] {
			t.Fatalf("GET /admin/v1/tenants/{id} %s: used %d from %s, want %d from %s", m.Meter, m.Used, m.Source, want[m.Meter], wantSource[m.Meter])
		}
	}
	if len(detail.Usage) != len(want) {
		t.Fatalf("GET /admin/v1/tenants/{id}: %d meters, want %d", len(detail.Usage), len(want))
	}

	// GET /v1/usage (last: it passes the limiter, which never counts a read
	// against a quota, but the other readers need not depend on that).
	var usage struct {
		Meters []struct {
			Meter string
			Used  int64
		}
	}
	if st := apiJSON(t, http.MethodGet, b.srv.URL+"/v1/usage", key.Key, "", &usage); st != http.StatusOK {
		t.Fatalf("GET /v1/usage: %d", st)
	}
	got := map[string]int64{}
	for _, m := range usage.Meters {
		got[m.Meter] = m.Used
	}
	for m, w := range want {
		if got[m] != w {
			t.Fatalf("GET /v1/usage %s: used %d, want %d (all %v)", m, got[m], w, got)
		}
	}
}

// checkMeters reads each [data-meter] block's first data-used value from a
// page's HTML.
func checkMeters(t *testing.T, where, body string, want map[string]int64) {
	t.Helper()
	for m, w := range want {
		i := strings.Index(body, `data-meter="`+m+`"`)
		if i < 0 {
			t.Fatalf("%s: no meter %s", where, m)
		}
		sub := regexp.MustCompile(`data-used="(\d+)"`).FindStringSubmatch(body[i:])
		if sub == nil || sub[1] != strconv.FormatInt(w, 10) {
			t.Fatalf("%s: %s used %v, want %d", where, m, sub, w)
		}
	}
}
