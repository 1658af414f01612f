package browser_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tollgatehq/tollgate/internal/notify"
)

// In Chromium: an admin adds a webhook endpoint on the console and sees its
// secret once, opens the endpoint, rotates its secret (a new one shown),
// disables it (the status says so) and finds its deliveries table.
func TestBrowserConsoleWebhooks(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	svc, err := notify.NewService(b.Pool, nil, notify.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	b.web.Webhooks = svc
	if _, err := b.Pool.Exec(b.Ctx, `TRUNCATE webhook_endpoints, webhook_events CASCADE`); err != nil {
		t.Fatal(err)
	}
	base := b.srv.URL
	admin := b.consoleTab(t, chrome, b.Admin)

	step(t, admin, "webhooks page", chromedp.Navigate(base+"/admin/webhooks"))
	do(t, admin, "type url", chromedp.SetValue(chromedp.CSS("#wh-url"), "https://203.0.113.9/hook"))
	do(t, admin, "type events", chromedp.SetValue(chromedp.CSS("#wh-events"), "quota.threshold"))
	if st := step(t, admin, "add", chromedp.Submit(chromedp.CSS("#wh-url"))); st != http.StatusOK {
		t.Fatalf("add: %d", st)
	}
	secret := text(t, admin, "#secret-value")
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret shown %q", secret)
	}
	step(t, admin, "open endpoint", chromedp.Click(chromedp.CSS(`a[href^="/admin/webhooks/"]`)))
	if h := text(t, admin, "h1"); h != "https://203.0.113.9/hook" {
		t.Fatalf("endpoint page heading %q", h)
	}
	if got := text(t, admin, "#deliveries tbody"); !strings.Contains(got, "No deliveries yet") {
		t.Fatalf("deliveries %q", got)
	}
	step(t, admin, "rotate", chromedp.Click(chromedp.CSS(`form[action$="/rotate-secret"] button`)))
	if s := text(t, admin, "#secret-value"); !strings.HasPrefix(s, "whsec_") || s == secret {
		t.Fatalf("rotated secret %q", s)
	}
	step(t, admin, "disable", chromedp.Click(chromedp.CSS(`form input[name="enabled"][value="off"] ~ button`)))
	if st := text(t, admin, "#ep-status"); !strings.Contains(st, "Disabled") {
		t.Fatalf("status after disable %q", st)
	}
}
