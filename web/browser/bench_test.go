package browser_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"testing"
	"time"
)

// BenchmarkDashboardRender is the server time of GET /dashboard (every
// query, Redis read and template) for a tenant with a month of hourly
// history of two meters and refusals on most days, through the full echo
// stack but without the network.
func BenchmarkDashboardRender(b *testing.B) {
	bd := setup(b)
	tn := bd.Tenant(b, "Bench Corp", bd.Pro)
	key := bd.Key(b, tn.ID)
	// 29 days back keeps the whole history inside the current period
	// whatever the month's length.
	bd.backdate(b, tn.ID, 29)
	bd.seedUsage(b, tn.ID, 24*30)
	var rows int
	if err := bd.Pool.QueryRow(bd.Ctx, `SELECT count(*) FROM usage_hourly WHERE tenant_id = $1`, tn.ID).Scan(&rows); err != nil || rows < 28*24*2 {
		b.Fatalf("seeded %d hourly rows (%v)", rows, err)
	}
	cookies := loginKey(b, bd.srv.URL, key.Key)
	h := bd.srv.Config.Handler
	get := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/dashboard", nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := get(); rec.Code != http.StatusOK {
		b.Fatalf("dashboard: %d\n%s", rec.Code, rec.Body.String())
	}
	for b.Loop() {
		if rec := get(); rec.Code != http.StatusOK {
			b.Fatalf("dashboard: %d", rec.Code)
		}
	}
	b.ReportMetric(float64(rows), "hourly_rows")
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// loginKey logs in to the dashboard with an API key, as a person does,
// and returns the session's cookies.
func loginKey(t testing.TB, base, key string) []*http.Cookie {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	r, err := c.Get(base + "/dashboard/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(r.Body)
	r.Body.Close()
	m := csrfRe.FindSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf token on the login page:\n%s", page)
	}
	if r, err = c.PostForm(base+"/dashboard/login", url.Values{"csrf": {string(m[1])}, "api_key": {key}}); err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK || r.Request.URL.Path != "/dashboard" {
		t.Fatalf("login: %d at %s", r.StatusCode, r.Request.URL)
	}
	// The session cookie's Path is /dashboard.
	return jar.Cookies(r.Request.URL)
}
