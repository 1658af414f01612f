package web

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// HEAD answers on every GET route as GET does, without a body; it was 405
// (404 on /dashboard/login).
func TestHeadOnEveryGetRoute(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Head Co", b.pro)
	key := b.key(t, tn.ID)
	admin := b.browser(t)
	admin.loginAdmin(b.admin)
	dash := b.browser(t)
	dash.loginKey(key.Key)
	params := strings.NewReplacer(":id", tn.ID, ":key", b.pro, ":oid", tn.ID, "*", "style.css")
	n := 0
	for _, r := range b.api.Echo().Routes() {
		if r.Method != http.MethodGet {
			continue
		}
		path := params.Replace(r.Path)
		if strings.HasPrefix(path, "/static/") {
			path = "/static/style.css"
		}
		br, bearer := b.browser(t), ""
		switch {
		case strings.HasPrefix(path, "/admin/v1/"), strings.HasPrefix(path, "/service/v1/"):
			// ADMIN_TOKEN opens the service API too: unauthenticated, its
			// routes' GETs and HEADs would pass the failed-login window (5
			// a minute) and compare 429s.
			bearer = b.admin
		case strings.HasPrefix(path, "/v1/"):
			bearer = key.Key
		case strings.HasPrefix(path, "/admin"):
			br = admin
		case strings.HasPrefix(path, "/dashboard"):
			br = dash
		}
		get, head := reqWith(br, http.MethodGet, path, bearer), reqWith(br, http.MethodHead, path, bearer)
		if head.status == http.StatusMethodNotAllowed || head.status != get.status {
			t.Errorf("HEAD %s = %d, GET = %d", path, head.status, get.status)
		}
		if head.body != "" {
			t.Errorf("HEAD %s sent a body of %d bytes", path, len(head.body))
		}
		if g, h := get.header.Get("Content-Type"), head.header.Get("Content-Type"); g != h {
			t.Errorf("HEAD %s: Content-Type %q, GET %q", path, h, g)
		}
		n++
	}
	if n < 20 {
		t.Fatalf("only %d GET routes checked", n)
	}
	// The login page, which was a 404 for HEAD.
	if r := reqWith(b.browser(t), http.MethodHead, "/dashboard/login", ""); r.status != http.StatusOK {
		t.Fatalf("HEAD /dashboard/login = %d", r.status)
	}
}

func reqWith(br *browser, method, path, bearer string) resp {
	br.t.Helper()
	req, _ := http.NewRequest(method, br.base+path, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return br.do(req)
}

func TestFaviconAndNoStoreOnCredentials(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := b.browser(t)
	r := br.get("/favicon.ico")
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "image/x-icon" || !strings.HasPrefix(r.body, "\x00\x00\x01\x00") {
		t.Fatalf("favicon: %d %q %d bytes", r.status, r.header.Get("Content-Type"), len(r.body))
	}
	tn := b.tenant(t, "Cache Co", b.free)
	link := reqWith(br, http.MethodPost, "/admin/v1/tenants/"+tn.ID+"/dashboard-links", b.admin)
	if link.status != http.StatusCreated || link.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("dashboard link: %d, Cache-Control %q", link.status, link.header.Get("Cache-Control"))
	}
	k := reqWith(br, http.MethodPost, "/admin/v1/tenants/"+tn.ID+"/api-keys", b.admin)
	if k.status != http.StatusCreated || k.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("API key: %d, Cache-Control %q", k.status, k.header.Get("Cache-Control"))
	}

	// The pages that show a credential: a key or a link the console makes,
	// a key the dashboard makes, the page a link opens (its token in the
	// URL and the form).
	admin, tok := b.adminBrowser(t)
	tenant := b.browser(t)
	wantRedirect(t, tenant.loginKey(b.key(t, tn.ID).Key), "/dashboard", "dashboard login")
	dashTok := csrf(t, tenant.get("/dashboard").body)
	for _, c := range []struct {
		name   string
		r      func() resp
		status int
		shows  *regexp.Regexp // the credential on the page
	}{
		{"console API key", func() resp {
			return admin.post("/admin/tenants/"+tn.ID+"/keys", url.Values{"csrf": {tok}, "name": {"cache"}})
		}, http.StatusCreated, newKeyRe},
		{"console dashboard link", func() resp {
			return admin.post("/admin/tenants/"+tn.ID+"/dashboard-link", url.Values{"csrf": {tok}})
		}, http.StatusCreated, newLinkRe},
		{"dashboard API key", func() resp {
			return tenant.post("/dashboard/keys", url.Values{"csrf": {dashTok}, "name": {"cache"}})
		}, http.StatusCreated, newKeyRe},
		{"dashboard link's page", func() resp { return b.browser(t).get(b.mint(t, tn.ID)) }, http.StatusOK, regexp.MustCompile(`name="token" value="([^"]+)"`)},
	} {
		r := c.r()
		wantStatus(t, r, c.status, c.name)
		if c.shows.FindStringSubmatch(r.body) == nil {
			t.Errorf("%s: the page shows no credential:\n%.2000s", c.name, r.body)
		}
		if cc := r.header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("%s: Cache-Control %q, want no-store", c.name, cc)
		}
	}
}
