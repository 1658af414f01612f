package httpapi

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/audit/readers"
	"github.com/tollgatehq/tollgate/internal/notify"
)

func webhookAPI(t *testing.T, opts notify.Options) *testAPI {
	t.Helper()
	a, _ := webhookAPIWith(t, opts)
	return a
}

// webhookAPIWith also returns the server's notify service.
func webhookAPIWith(t *testing.T, opts notify.Options) (*testAPI, **notify.Service) {
	t.Helper()
	svc := new(*notify.Service)
	return newTestAPI(t, testAPIOptions{Deps: func(d *Deps) {
		d.Audit = audit.New(d.DB, d.Log)
		readers.Register(d.Audit, d.Entitlements, d.Catalogue, d.Credentials, nil, nil)
		if opts.SecretKey == nil {
			opts.SecretKey = make([]byte, 32) // WEBHOOK_SECRET_KEY
		}
		n, err := notify.NewService(d.DB, d.Log, opts)
		if err != nil {
			t.Fatal(err)
		}
		d.Notify = n
		*svc = n
	}}), svc
}

// The endpoints' routes: create shows the secret once, list/get never do,
// patch and rotate answer the endpoint, delete is 204 then 404; each change
// is in the audit trail, without the secret.
func TestWebhookEndpointRoutes(t *testing.T) {
	t.Parallel()
	a := webhookAPI(t, notify.Options{})
	r := a.admin(t, http.MethodPost, "/admin/v1/webhook-endpoints", map[string]any{
		"url": "https://203.0.113.7/hooks", "events": []string{"quota.threshold"}, "description": "ops"}, http.StatusCreated)
	id, _ := r.JSON["id"].(string)
	secret, _ := r.JSON["secret"].(string)
	if id == "" || !strings.HasPrefix(secret, "whsec_") || r.JSON["enabled"] != true {
		t.Fatalf("created %s", r.Raw)
	}
	r = a.admin(t, http.MethodGet, "/admin/v1/webhook-endpoints/"+id, nil, http.StatusOK)
	if _, ok := r.JSON["secret"]; ok || r.JSON["description"] != "ops" {
		t.Errorf("get %s: want no secret", r.Raw)
	}
	r = a.admin(t, http.MethodGet, "/admin/v1/webhook-endpoints", nil, http.StatusOK)
	if strings.Contains(string(r.Raw), "whsec_") || !strings.Contains(string(r.Raw), id) {
		t.Errorf("list %s", r.Raw)
	}
	r = a.admin(t, http.MethodPatch, "/admin/v1/webhook-endpoints/"+id, map[string]any{"enabled": false, "events": []string{}}, http.StatusOK)
	if r.JSON["enabled"] != false || len(r.JSON["events"].([]any)) != 0 {
		t.Errorf("patch %s", r.Raw)
	}
	r = a.admin(t, http.MethodPost, "/admin/v1/webhook-endpoints/"+id+"/rotate-secret", nil, http.StatusOK)
	rotated, _ := r.JSON["secret"].(string)
	if !strings.HasPrefix(rotated, "whsec_") || rotated == secret {
		t.Errorf("rotate %s", r.Raw)
	}
	a.admin(t, http.MethodDelete, "/admin/v1/webhook-endpoints/"+id, nil, http.StatusNoContent)
	a.admin(t, http.MethodGet, "/admin/v1/webhook-endpoints/"+id, nil, http.StatusNotFound)
	a.admin(t, http.MethodDelete, "/admin/v1/webhook-endpoints/"+id, nil, http.StatusNotFound)
	a.admin(t, http.MethodPatch, "/admin/v1/webhook-endpoints/nope", map[string]any{"enabled": true}, http.StatusNotFound)

	r = a.admin(t, http.MethodGet, "/admin/v1/audit?limit=200", nil, http.StatusOK)
	if strings.Contains(string(r.Raw), secret[6:]) || strings.Contains(string(r.Raw), rotated[6:]) {
		t.Errorf("a secret reached the audit trail")
	}
	var got []string
	for _, e := range r.JSON["entries"].([]any) {
		m := e.(map[string]any)
		if m["target"] == id {
			got = append(got, m["action"].(string))
		}
	}
	slices.Sort(got)
	want := []string{"webhook_endpoint.create", "webhook_endpoint.delete", "webhook_endpoint.edit", "webhook_endpoint.rotate_secret"}
	if !slices.Equal(got, want) {
		t.Errorf("audited %v, want %v", got, want)
	}
}

// Bad input is a problem naming the field: 400 for form and unknown event
// types, 422 for a private address; never a 500.
func TestWebhookEndpointValidation(t *testing.T) {
	t.Parallel()
	a := webhookAPI(t, notify.Options{})
	for _, c := range []struct {
		body   any
		status int
		field  string
	}{
		{map[string]any{"url": "http://203.0.113.7/"}, 400, "url"},
		{map[string]any{"url": "https://203.0.113.7/", "events": []string{"quota.nope"}}, 400, "events[0]"},
		{map[string]any{"url": "https://127.0.0.1/"}, 422, "url"},
		{map[string]any{"url": "https://169.254.169.254/"}, 422, "url"},
		{map[string]any{"url": "https://203.0.113.7/", "secret": "mine"}, 400, ""},
		{`{"url": 5}`, 400, ""},
	} {
		r := a.admin(t, http.MethodPost, "/admin/v1/webhook-endpoints", c.body, c.status)
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%v: content type %q", c.body, r.Header.Get("Content-Type"))
		}
		if c.field != "" && !slices.Contains(r.FieldErrors(), c.field) {
			t.Errorf("%v: errors %v, want %s", c.body, r.FieldErrors(), c.field)
		}
	}
	a.admin(t, http.MethodPatch, "/admin/v1/webhook-endpoints/00000000-0000-0000-0000-000000000000", map[string]any{"url": "ftp://x"}, 400)
	// Without the service the routes answer 503.
	b := newTestAPI(t, testAPIOptions{})
	b.admin(t, http.MethodGet, "/admin/v1/webhook-endpoints", nil, http.StatusServiceUnavailable)
}

// The secret is never kept for an Idempotency-Key replay: create and
// rotate refuse the header (400 naming it), and answer no-store.
func TestWebhookSecretAnswersAreNotStored(t *testing.T) {
	t.Parallel()
	a := webhookAPI(t, notify.Options{})
	req, _ := http.NewRequest(http.MethodPost, a.URL+"/admin/v1/webhook-endpoints", strings.NewReader(`{"url":"https://203.0.113.7/"}`))
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("create with Idempotency-Key: %d, want 400", res.StatusCode)
	}
	r := a.admin(t, http.MethodPost, "/admin/v1/webhook-endpoints", map[string]any{"url": "https://203.0.113.7/"}, http.StatusCreated)
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("create: Cache-Control %q", r.Header.Get("Cache-Control"))
	}
	r = a.admin(t, http.MethodPost, "/admin/v1/webhook-endpoints/"+r.JSON["id"].(string)+"/rotate-secret", nil, http.StatusOK)
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("rotate: Cache-Control %q", r.Header.Get("Cache-Control"))
	}
}

// The deliveries' routes: the list shows each delivery, retry answers 202
// (409 once delivered), replay 202 (404 for an unknown event), bad paging
// is a 400 naming the parameter; retry and replay are audited with the
// endpoint as target.
func TestWebhookDeliveryRoutes(t *testing.T) {
	a, svc := webhookAPIWith(t, notify.Options{})
	r := a.admin(t, http.MethodPost, "/admin/v1/webhook-endpoints", map[string]any{"url": "https://203.0.113.7/hooks"}, http.StatusCreated)
	id := r.JSON["id"].(string)
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		_, err := (*svc).Emit(ctx, tx, notify.Event{Type: notify.TypeSubscriptionStatus, Data: map[string]any{"status": "active"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	base := "/admin/v1/webhook-endpoints/" + id
	r = a.admin(t, http.MethodGet, base+"/deliveries", nil, http.StatusOK)
	ds := r.JSON["deliveries"].([]any)
	if len(ds) != 1 {
		t.Fatalf("deliveries %s", r.Raw)
	}
	d := ds[0].(map[string]any)
	if d["status"] != "pending" || d["event_type"] != "subscription.status" || d["attempts"] != float64(0) {
		t.Errorf("delivery %v", d)
	}
	did := strconv.FormatInt(int64(d["id"].(float64)), 10)
	eid := d["event_id"].(string)
	a.admin(t, http.MethodPost, base+"/deliveries/"+did+"/retry", nil, http.StatusAccepted)
	a.admin(t, http.MethodPost, base+"/events/"+eid+"/replay", nil, http.StatusAccepted)
	if _, err := a.Pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'delivered'`); err != nil {
		t.Fatal(err)
	}
	a.admin(t, http.MethodPost, base+"/deliveries/"+did+"/retry", nil, http.StatusConflict)
	a.admin(t, http.MethodPost, base+"/deliveries/999999/retry", nil, http.StatusNotFound)
	a.admin(t, http.MethodPost, base+"/deliveries/x/retry", nil, http.StatusNotFound)
	a.admin(t, http.MethodPost, base+"/events/msg_nope/replay", nil, http.StatusNotFound)
	a.admin(t, http.MethodGet, "/admin/v1/webhook-endpoints/00000000-0000-0000-0000-000000000000/deliveries", nil, http.StatusNotFound)
	for q, field := range map[string]string{"limit=0x": "limit", "limit=500": "limit", "before=-1": "before", "before=x": "before"} {
		r := a.admin(t, http.MethodGet, base+"/deliveries?"+q, nil, http.StatusBadRequest)
		if !slices.Contains(r.FieldErrors(), field) {
			t.Errorf("%s: errors %v, want %s", q, r.FieldErrors(), field)
		}
	}
	r = a.admin(t, http.MethodGet, "/admin/v1/audit?limit=200", nil, http.StatusOK)
	var got []string
	for _, e := range r.JSON["entries"].([]any) {
		m := e.(map[string]any)
		if m["target"] == id && strings.HasPrefix(m["action"].(string), "webhook_") && m["action"] != "webhook_endpoint.create" {
			got = append(got, m["action"].(string))
		}
	}
	slices.Sort(got)
	if want := []string{"webhook_delivery.retry", "webhook_event.replay"}; !slices.Equal(got, want) {
		t.Errorf("audited %v, want %v", got, want)
	}
}
