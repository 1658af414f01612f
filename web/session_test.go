package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

func TestDashboardLinkLogsInOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Acme Links", b.free)

	// Minted through the admin API, as an admin would.
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/admin/v1/tenants/"+tn.ID+"/dashboard-links", nil)
	req.Header.Set("Authorization", "Bearer "+b.admin)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var link struct {
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	_ = json.NewDecoder(r.Body).Decode(&link)
	r.Body.Close()
	if r.StatusCode != http.StatusCreated || !strings.HasPrefix(link.URL, "/dashboard/login?token=") {
		t.Fatalf("mint: %d %+v", r.StatusCode, link)
	}
	if d := time.Until(link.ExpiresAt); d < 14*time.Minute || d > 16*time.Minute {
		t.Fatalf("expires_at %v is not 15 minutes ahead", link.ExpiresAt)
	}
	// Only the token's hash is stored.
	tok, _ := url.Parse(link.URL)
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM dashboard_links WHERE token_hash = $1 AND tenant_id = $2`,
		hashToken(tok.Query().Get("token")), tn.ID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("stored link rows by hash = %d, %v", n, err)
	}

	br := b.browser(t)
	// Fetching the link (a mail scanner, a preview) does not use it.
	wantStatus(t, br.get(link.URL), http.StatusOK, "first GET")
	wantRedirect(t, br.loginLink(link.URL), "/dashboard", "login")
	page := br.get("/dashboard")
	wantStatus(t, page, http.StatusOK, "dashboard")
	if !strings.Contains(page.body, "Acme Links") {
		t.Fatal("dashboard does not show the tenant's name")
	}

	// Used: both the page and the POST refuse it, in another browser too.
	other := b.browser(t)
	wantStatus(t, other.get(link.URL), http.StatusGone, "GET of a used link")
	pg := other.get("/dashboard/login")
	r2 := other.post("/dashboard/login", url.Values{"csrf": {csrf(t, pg.body)}, "token": {tok.Query().Get("token")}})
	wantStatus(t, r2, http.StatusGone, "POST of a used link")
	wantRedirect(t, other.get("/dashboard"), "/dashboard/login", "dashboard without a session")
}

func TestDashboardLinkExpiredOrUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Acme Expired", b.free)
	link := b.mint(t, tn.ID)
	if _, err := b.pool.Exec(b.ctx, `UPDATE dashboard_links SET expires_at = now() - interval '1 second' WHERE tenant_id = $1`, tn.ID); err != nil {
		t.Fatal(err)
	}
	br := b.browser(t)
	wantStatus(t, br.get(link), http.StatusGone, "expired link")
	wantStatus(t, br.get("/dashboard/login?token=nonsense"), http.StatusGone, "unknown token")
	wantStatus(t, br.get("/dashboard/login?token="), http.StatusGone, "empty token")

	// Minting for a tenant that does not exist, or a malformed id, is a 404.
	for _, id := range []string{"00000000-0000-0000-0000-000000000000", "not-a-uuid"} {
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/admin/v1/tenants/"+id+"/dashboard-links", nil)
		req.Header.Set("Authorization", "Bearer "+b.admin)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusNotFound {
			t.Fatalf("mint for %s: %d, want 404", id, r.StatusCode)
		}
	}
}

func TestAPIKeyLogin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Acme Keys", b.free)
	k := b.key(t, tn.ID)

	br := b.browser(t)
	wantStatus(t, br.loginKey("tg_wrong"), http.StatusUnauthorized, "unknown key")
	wantStatus(t, br.loginKey(""), http.StatusUnauthorized, "empty key")
	wantRedirect(t, br.loginKey(k.Key), "/dashboard", "good key")
	page := br.get("/dashboard")
	wantStatus(t, page, http.StatusOK, "dashboard")
	if !strings.Contains(page.body, k.Prefix) || strings.Contains(page.body, k.Key) {
		t.Fatal("the dashboard must list the key by prefix and never show the key")
	}

	if err := b.keys.RevokeKey(b.ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, b.browser(t).loginKey(k.Key), http.StatusUnauthorized, "revoked key")
}

func TestSessionCookie(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Acme Cookie", b.free)
	check := func(proto string, wantSecure bool) {
		t.Helper()
		br := b.browser(t)
		page := br.get(b.mint(t, tn.ID))
		u, _ := url.Parse(b.mint(t, tn.ID))
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/dashboard/login",
			strings.NewReader(url.Values{"csrf": {csrf(t, page.body)}, "token": {u.Query().Get("token")}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if proto != "" {
			req.Header.Set("X-Forwarded-Proto", proto)
		}
		r, err := br.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		var got *http.Cookie
		for _, c := range r.Cookies() {
			if c.Name == cookieTenant {
				got = c
			}
		}
		if got == nil {
			t.Fatalf("no session cookie (status %d)", r.StatusCode)
		}
		if !got.HttpOnly || got.SameSite != http.SameSiteLaxMode || got.Path != "/dashboard" || got.Secure != wantSecure || got.MaxAge <= 0 {
			t.Fatalf("cookie %+v: want HttpOnly, SameSite=Lax, Path=/dashboard, Secure=%v", got, wantSecure)
		}
		// Only the hash of the cookie's id is stored.
		var n int
		_ = b.pool.QueryRow(b.ctx, `SELECT count(*) FROM web_sessions WHERE id_hash = $1 AND tenant_id = $2`, hashToken(got.Value), tn.ID).Scan(&n)
		if n != 1 {
			t.Fatalf("session rows by hash = %d", n)
		}
	}
	check("", false)
	check("https", true)
}

func TestSessionExpiresAndLogout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Acme Expiry", b.free)

	br := b.browser(t)
	br.loginLink(b.mint(t, tn.ID))
	wantStatus(t, br.get("/dashboard"), http.StatusOK, "logged in")
	if _, err := b.pool.Exec(b.ctx, `UPDATE web_sessions SET expires_at = now() - interval '1 second' WHERE tenant_id = $1`, tn.ID); err != nil {
		t.Fatal(err)
	}
	wantRedirect(t, br.get("/dashboard"), "/dashboard/login", "expired session")

	br = b.browser(t)
	br.loginLink(b.mint(t, tn.ID))
	page := br.get("/dashboard")
	wantStatus(t, page, http.StatusOK, "logged in again")
	// Logout is a POST with the CSRF token; it deletes the row.
	wantStatus(t, br.post("/dashboard/logout", url.Values{}), http.StatusForbidden, "logout without csrf")
	wantRedirect(t, br.post("/dashboard/logout", url.Values{"csrf": {csrf(t, page.body)}}), "/dashboard/login?out=1", "logout")
	var n int
	_ = b.pool.QueryRow(b.ctx, `SELECT count(*) FROM web_sessions WHERE tenant_id = $1 AND expires_at > now()`, tn.ID).Scan(&n)
	if n != 0 {
		t.Fatalf("%d live sessions after logout", n)
	}
	wantRedirect(t, br.get("/dashboard"), "/dashboard/login", "after logout")
}

func TestCSRFRequiredOnEveryForm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Acme CSRF", b.free)
	k := b.key(t, tn.ID)

	// Login forms: the pre-session token must match its cookie.
	br := b.browser(t)
	br.get("/dashboard/login")
	wantStatus(t, br.post("/dashboard/login", url.Values{"api_key": {k.Key}}), http.StatusForbidden, "key login without csrf")
	wantStatus(t, br.post("/dashboard/login", url.Values{"api_key": {k.Key}, "csrf": {randomToken()}}), http.StatusForbidden, "key login with a wrong csrf")
	br.get("/admin/login")
	wantStatus(t, br.post("/admin/login", url.Values{"token": {b.admin}}), http.StatusForbidden, "admin login without csrf")

	wantRedirect(t, br.loginKey(k.Key), "/dashboard", "login")
	page := br.get("/dashboard")
	tok := csrf(t, page.body)
	wantStatus(t, br.post("/dashboard/keys", url.Values{"name": {"x"}}), http.StatusForbidden, "issue key without csrf")
	wantStatus(t, br.post("/dashboard/keys", url.Values{"name": {"x"}, "csrf": {tok + "x"}}), http.StatusForbidden, "issue key with a wrong csrf")
	wantStatus(t, br.post("/dashboard/keys/"+k.ID+"/revoke", url.Values{}), http.StatusForbidden, "revoke without csrf")
	if _, err := b.keys.Authenticate(b.ctx, k.Key); err != nil {
		t.Fatalf("the key must survive a revoke without csrf: %v", err)
	}
	// Another session's token is not this session's.
	other := b.browser(t)
	other.loginKey(k.Key)
	otherTok := csrf(t, other.get("/dashboard").body)
	wantStatus(t, br.post("/dashboard/keys", url.Values{"name": {"x"}, "csrf": {otherTok}}), http.StatusForbidden, "another session's csrf")

	r := br.post("/dashboard/keys", url.Values{"name": {"ci"}, "csrf": {tok}})
	wantStatus(t, r, http.StatusCreated, "issue key with csrf")
	if !strings.Contains(r.body, `id="newkey"`) {
		t.Fatal("the new key is not shown")
	}

	// The console's forms too.
	ad := b.browser(t)
	wantRedirect(t, ad.loginAdmin(b.admin), "/admin/tenants", "admin login")
	wantStatus(t, ad.post("/admin/tenants/"+tn.ID+"/plan", url.Values{"plan": {b.pro}}), http.StatusForbidden, "plan change without csrf")
	if got, _ := b.ents.GetTenant(b.ctx, tn.ID); got.Plan != b.free {
		t.Fatalf("plan changed to %s without a csrf token", got.Plan)
	}
}

func TestTenantSessionSeesOnlyItsTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.tenant(t, "Tenant Alpha", b.free)
	o := b.tenant(t, "Tenant Omega", b.free)
	ak, ok := b.key(t, a.ID), b.key(t, o.ID)

	br := b.browser(t)
	wantRedirect(t, br.loginKey(ak.Key), "/dashboard", "login")
	page := br.get("/dashboard")
	if strings.Contains(page.body, "Tenant Omega") || strings.Contains(page.body, ok.Prefix) {
		t.Fatal("tenant A's dashboard shows tenant B's data")
	}
	tok := csrf(t, page.body)
	// B's key id, and garbage ids, are 404 to A; B's key keeps working.
	wantStatus(t, br.post("/dashboard/keys/"+ok.ID+"/revoke", url.Values{"csrf": {tok}}), http.StatusNotFound, "revoke another tenant's key")
	wantStatus(t, br.post("/dashboard/keys/nope/revoke", url.Values{"csrf": {tok}}), http.StatusNotFound, "revoke a malformed id")
	if _, err := b.keys.Authenticate(b.ctx, ok.Key); err != nil {
		t.Fatalf("tenant B's key was revoked by tenant A: %v", err)
	}
	// A's own key: revoked.
	wantRedirect(t, br.post("/dashboard/keys/"+ak.ID+"/revoke", url.Values{"csrf": {tok}}), "/dashboard?done=revoked", "revoke own key")

	// A tenant session is no console session, even sent under the console's
	// cookie name.
	sessCookie := ""
	for _, c := range br.c.Jar.Cookies(mustURL(b.srv.URL + "/dashboard")) {
		if c.Name == cookieTenant {
			sessCookie = c.Value
		}
	}
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/admin/tenants/"+o.ID, nil)
	req.AddCookie(&http.Cookie{Name: cookieAdmin, Value: sessCookie})
	r := br.do(req)
	wantRedirect(t, r, "/admin/login", "tenant session on the console")
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func TestConsoleNeedsLogin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Acme Console", b.free)
	br := b.browser(t)
	for _, p := range []string{"/admin", "/admin/tenants", "/admin/tenants/" + tn.ID, "/admin/plans", "/admin/events", "/admin/drift"} {
		wantRedirect(t, br.get(p), "/admin/login", p)
	}
	wantStatus(t, br.post("/admin/tenants/"+tn.ID+"/plan", url.Values{"plan": {b.pro}}), http.StatusUnauthorized, "POST without a session")
	wantStatus(t, br.loginAdmin("wrong-token"), http.StatusUnauthorized, "wrong admin token")
	page := br.get("/admin/login")
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/admin/login",
		strings.NewReader(url.Values{"csrf": {csrf(t, page.body)}, "token": {b.admin}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-Proto", "https")
	r, err := br.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/admin/tenants" {
		t.Fatalf("right admin token: %d %s", r.StatusCode, r.Header.Get("Location"))
	}
	var ck *http.Cookie
	for _, c := range r.Cookies() {
		if c.Name == cookieAdmin {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/admin" {
		t.Fatalf("admin cookie %+v", ck)
	}
	tenants := br.get("/admin/tenants")
	wantStatus(t, tenants, http.StatusOK, "tenants")

	// The console session expires server-side and logout deletes it.
	if _, err := b.pool.Exec(b.ctx, `UPDATE web_sessions SET expires_at = now() - interval '1 second' WHERE id_hash = $1`, hashToken(ck.Value)); err != nil {
		t.Fatal(err)
	}
	wantRedirect(t, br.get("/admin/tenants"), "/admin/login", "expired console session")
	wantRedirect(t, br.loginAdmin(b.admin), "/admin/tenants", "login again")
	sid := ""
	for _, c := range br.c.Jar.Cookies(mustURL(b.srv.URL + "/admin")) {
		if c.Name == cookieAdmin {
			sid = c.Value
		}
	}
	tenants = br.get("/admin/tenants")
	wantRedirect(t, br.post("/admin/logout", url.Values{"csrf": {csrf(t, tenants.body)}}), "/admin/login?out=1", "logout")
	wantRedirect(t, br.get("/admin/tenants"), "/admin/login", "after logout")
	var n int
	_ = b.pool.QueryRow(b.ctx, `SELECT count(*) FROM web_sessions WHERE id_hash = $1`, hashToken(sid)).Scan(&n)
	if sid == "" || n != 0 {
		t.Fatalf("session row still there after logout (%d rows, cookie %q)", n, sid)
	}
}

func TestFailedLoginsAreLimitedPerIP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Acme Guard", b.free)
	k := b.key(t, tn.ID)
	br := b.browser(t)
	for i := 0; i < 5; i++ {
		wantStatus(t, br.loginAdmin("wrong"), http.StatusUnauthorized, "wrong admin token")
	}
	// Out of failures: the next wrong token is refused 429...
	r := br.loginAdmin("wrong again")
	wantStatus(t, r, http.StatusTooManyRequests, "wrong token after too many failures")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// ...but a valid credential from the same address is never locked out,
	// and the dashboard's key login counts in its own bucket.
	wantRedirect(t, br.loginAdmin(b.admin), "/admin/tenants", "right token from the same address")
	wantRedirect(t, br.loginKey(k.Key), "/dashboard", "key login from the same address")
	for i := 0; i < 5; i++ {
		wantStatus(t, br.loginKey("tg_wrong"), http.StatusUnauthorized, "wrong key")
	}
	wantStatus(t, br.loginKey("tg_wrong"), http.StatusTooManyRequests, "wrong key after too many failures")
	wantRedirect(t, br.loginKey(k.Key), "/dashboard", "right key after too many failures")
}

func TestFormBodiesAreLimited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := b.browser(t)
	page := br.get("/dashboard/login")
	r := br.post("/dashboard/login", url.Values{"csrf": {csrf(t, page.body)}, "api_key": {strings.Repeat("k", 100<<10)}})
	wantStatus(t, r, http.StatusRequestEntityTooLarge, "100 KiB form")
}

// A NUL byte or invalid UTF-8 in the console's search is a 400, not a 500.
func TestConsoleSearchWithNULIs400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := b.browser(t)
	wantRedirect(t, br.loginAdmin(b.admin), "/admin/tenants", "login")
	wantStatus(t, br.get("/admin/tenants?q=%00"), http.StatusBadRequest, "NUL in the search")
	wantStatus(t, br.get("/admin/tenants?q=%ff"), http.StatusBadRequest, "invalid UTF-8 in the search")
	wantStatus(t, br.get("/admin/tenants/%00"), http.StatusBadRequest, "NUL in a tenant path")
}

// A dashboard session opened with an API key ends when the key is revoked
// (it could otherwise mint new keys); a console session ends when
// ADMIN_TOKEN changes.
func TestSessionsEndWithTheirCredential(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Acme Revoked", b.free)
	k := b.key(t, tn.ID)
	br := b.browser(t)
	wantRedirect(t, br.loginKey(k.Key), "/dashboard", "key login")
	wantStatus(t, br.get("/dashboard"), http.StatusOK, "dashboard with a live key")
	if err := b.keys.RevokeKey(b.ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	wantRedirect(t, br.get("/dashboard"), "/dashboard/login", "dashboard after the key's revocation")

	// A link session is not tied to a key: revoking another key leaves it.
	k2 := b.key(t, tn.ID)
	br2 := b.browser(t)
	link := b.mint(t, tn.ID)
	br2.loginLink(link)
	wantStatus(t, br2.get("/dashboard"), http.StatusOK, "dashboard through a link")
	if err := b.keys.RevokeKey(b.ctx, k2.ID); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, br2.get("/dashboard"), http.StatusOK, "link session after an unrelated revocation")

	// Console: the session holds the hash of the token it was opened with.
	raw, _, err := b.web.store.createSession(b.ctx, kindAdmin, "", credential{adminHash: hashToken(b.admin)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.web.store.session(b.ctx, raw, kindAdmin, [][]byte{hashToken(b.admin)}); err != nil {
		t.Fatalf("console session with the same token: %v", err)
	}
	if _, err := b.web.store.session(b.ctx, raw, kindAdmin, [][]byte{hashToken("tga_rotated")}); apperr.CodeOf(err) != apperr.Unauthorized {
		t.Fatalf("console session after ADMIN_TOKEN rotation: %v, want Unauthorized", err)
	}
	bra := b.browser(t)
	wantRedirect(t, bra.loginAdmin(b.admin), "/admin/tenants", "admin login")
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM web_sessions WHERE kind = 'admin' AND admin_token_hash = $1`, hashToken(b.admin)).Scan(&n); err != nil || n < 2 {
		t.Fatalf("console sessions carrying the token's hash: %d %v", n, err)
	}
}
