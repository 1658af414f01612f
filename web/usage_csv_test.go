package web

import (
	"encoding/csv"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDashboardUsageCSV downloads the per-day usage through the real server:
// the figures the test put in (the first, partial hour included, the
// previous period's part of that hour not), only the session's own tenant,
// HEAD, and no session.
func TestDashboardUsageCSV(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.tenant(t, uniq("csv-a"), b.pro)
	other := b.tenant(t, uniq("csv-b"), b.pro)

	snap, err := b.ents.SnapshotFromPostgres(b.ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	start := snap.PeriodStart.UTC()
	first := start.Truncate(time.Hour) // the hour the period starts in counts
	day0 := time.Date(start.Year(), start.Month(), start.Day(), 0, 0, 0, 0, time.UTC)
	day1 := day0.AddDate(0, 0, 1)
	periodOf := start // rows of the current period unless a test says
	ins := func(tenantID, meter string, hour time.Time, used int64) {
		t.Helper()
		if _, err := b.pool.Exec(b.ctx, `INSERT INTO usage_hourly (tenant_id, period_start, meter, hour, used) VALUES ($1, $2, $3, $4, $5)`,
			tenantID, periodOf, meter, hour, used); err != nil {
			t.Fatal(err)
		}
	}
	ins(a.ID, "requests", first, 332)
	ins(a.ID, "exports", first, 72)
	// The previous period's end in the same clock hour, and before it:
	// never exported with this period.
	periodOf = start.AddDate(0, -1, 0)
	ins(a.ID, "requests", first, 7000)
	ins(a.ID, "requests", first.Add(-2*time.Hour), 5555)
	periodOf = start
	// A second row the same day adds up; a row the next day is its own line.
	second := first.Add(time.Hour)
	if second.Before(day1) {
		ins(a.ID, "requests", second, 8)
	} else {
		ins(a.ID, "requests", first.Add(2*time.Hour), 8) // next day: kept apart below
	}
	ins(a.ID, "requests", day1.Add(5*time.Hour), 41)
	otherSnap, err := b.ents.SnapshotFromPostgres(b.ctx, other.ID)
	if err != nil {
		t.Fatal(err)
	}
	periodOf = otherSnap.PeriodStart.UTC()
	ins(other.ID, "requests", periodOf.Truncate(time.Hour), 9999)
	periodOf = start

	want := [][]string{{"day", "meter", "quantity"}}
	if second.Before(day1) {
		want = append(want, []string{day0.Format("2006-01-02"), "exports", "72"},
			[]string{day0.Format("2006-01-02"), "requests", "340"},
			[]string{day1.Format("2006-01-02"), "requests", "41"})
	} else {
		want = append(want, []string{day0.Format("2006-01-02"), "exports", "72"},
			[]string{day0.Format("2006-01-02"), "requests", "332"},
			[]string{day1.Format("2006-01-02"), "requests", "49"})
	}

	br := b.browser(t)
	wantRedirect(t, br.loginLink(b.mint(t, a.ID)), "/dashboard", "login a")
	page := br.get("/dashboard")
	wantStatus(t, page, http.StatusOK, "dashboard")
	if !strings.Contains(page.body, `href="/dashboard/usage.csv"`) {
		t.Fatalf("dashboard has no link to the CSV export")
	}
	r := br.get("/dashboard/usage.csv")
	wantStatus(t, r, http.StatusOK, "csv a")
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") {
		t.Fatalf("Content-Type %q, want text/csv", ct)
	}
	if cd := r.header.Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment") {
		t.Fatalf("Content-Disposition %q, want attachment", cd)
	}
	got, err := csv.NewReader(strings.NewReader(r.body)).ReadAll()
	if err != nil {
		t.Fatalf("parse csv: %v\n%s", err, r.body)
	}
	if !equalRows(got, want) {
		t.Fatalf("csv of a:\n%v\nwant\n%v", got, want)
	}

	head := reqWith(br, http.MethodHead, "/dashboard/usage.csv", "")
	wantStatus(t, head, http.StatusOK, "HEAD csv")
	if !strings.HasPrefix(head.header.Get("Content-Type"), "text/csv") || head.body != "" {
		t.Fatalf("HEAD: Content-Type %q body %q", head.header.Get("Content-Type"), head.body)
	}

	bb := b.browser(t)
	wantRedirect(t, bb.loginLink(b.mint(t, other.ID)), "/dashboard", "login b")
	rb := bb.get("/dashboard/usage.csv")
	wantStatus(t, rb, http.StatusOK, "csv b")
	gotB, err := csv.NewReader(strings.NewReader(rb.body)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	wantB := [][]string{{"day", "meter", "quantity"}, {otherSnap.PeriodStart.UTC().Format("2006-01-02"), "requests", "9999"}}
	if !equalRows(gotB, wantB) {
		t.Fatalf("csv of b:\n%v\nwant\n%v", gotB, wantB)
	}

	anon := b.browser(t)
	wantRedirect(t, anon.get("/dashboard/usage.csv"), "/dashboard/login", "no session")
	if r := anon.post("/dashboard/usage.csv", nil); r.status == http.StatusOK {
		t.Fatalf("POST without session: %d", r.status)
	}
}

func equalRows(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], ",") != strings.Join(b[i], ",") {
			return false
		}
	}
	return true
}
