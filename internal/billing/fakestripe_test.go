package billing_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// fakeStripe is a small stateful Stripe for what stripe-mock cannot do: it
// keeps subscriptions (so that events as notifications read the state a test
// set), answers scripted errors, and replays a saved answer for a repeated
// Idempotency-Key as Stripe does. validate, when set, is stripe-mock: every
// POST is also sent there and must be accepted (request shape).
type fakeStripe struct {
	t        testing.TB
	URL      string
	validate string

	mu       sync.Mutex
	subs     map[string]map[string]any // id → subscription at the pinned version
	features map[string][]string       // customer → lookup keys
	// failNext answers the next n subscription updates with status code.
	failNext int
	failCode int
	// pending: updates answer with pending_update set (pending_if_incomplete
	// and a payment that failed) and change nothing.
	pending bool
	saved   map[string]fakeAnswer     // idempotency key → answer
	prices  map[string]map[string]any // id → price (GET /v1/prices/{id})
	meters  map[string]map[string]any // id → Billing Meter (GET /v1/billing/meters/{id})
	posts   []fakePost
	gets    int
}

type fakeAnswer struct {
	code int
	body []byte
}

type fakePost struct {
	Path string
	Form url.Values
	Key  string
}

func newFakeStripe(t testing.TB) *fakeStripe {
	f := &fakeStripe{t: t, subs: map[string]map[string]any{}, features: map[string][]string{}, saved: map[string]fakeAnswer{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// setPrice makes the fake answer a recurring price.
func (f *fakeStripe) setPrice(id, interval, currency string, amount int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.prices == nil {
		f.prices = map[string]map[string]any{}
	}
	f.prices[id] = map[string]any{"id": id, "object": "price", "active": true, "currency": currency, "unit_amount": amount, "type": "recurring",
		"recurring": map[string]any{"interval": interval, "interval_count": 1, "usage_type": "licensed"}}
}

// setMeteredPrice makes the fake answer a metered price on Billing Meter
// meter (event name event) at unitAmountDecimal per divideBy units (the
// shape of the 2024-06-20 price: recurring.meter, transform_quantity).
func (f *fakeStripe) setMeteredPrice(id, currency, unitAmountDecimal string, divideBy int64, meter, event string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.prices == nil {
		f.prices = map[string]map[string]any{}
	}
	if f.meters == nil {
		f.meters = map[string]map[string]any{}
	}
	var transform any
	if divideBy > 1 {
		transform = map[string]any{"divide_by": divideBy, "round": "up"}
	}
	// "" is a tiered price, as Stripe shows one: no unit amounts, the
	// tiers (not expanded) in their place.
	scheme, amount, tiersMode := "per_unit", any(unitAmountDecimal), any(nil)
	if unitAmountDecimal == "" {
		scheme, amount, tiersMode = "tiered", nil, "graduated"
	}
	f.prices[id] = map[string]any{"id": id, "object": "price", "active": true, "currency": currency, "billing_scheme": scheme,
		"unit_amount": nil, "unit_amount_decimal": amount, "tiers_mode": tiersMode, "type": "recurring", "transform_quantity": transform,
		"recurring": map[string]any{"interval": "month", "interval_count": 1, "usage_type": "metered", "meter": meter, "aggregate_usage": nil}}
	f.meters[meter] = map[string]any{"id": meter, "object": "billing.meter", "event_name": event, "display_name": event, "status": "active",
		"customer_mapping":    map[string]any{"event_payload_key": "stripe_customer_id", "type": "by_id"},
		"default_aggregation": map[string]any{"formula": "sum"}, "value_settings": map[string]any{"event_payload_key": "value"}}
}

// fakeSub builds a subscription at the pinned version (2024-06-20 shape:
// the period on the subscription, items with price and quantity).
func fakeSub(id, customer, status string, start, end int64, items ...[3]any) map[string]any {
	data := []any{}
	for _, it := range items {
		data = append(data, map[string]any{"id": it[0], "object": "subscription_item", "price": map[string]any{"id": it[1], "object": "price"},
			"quantity": it[2], "subscription": id})
	}
	return map[string]any{"id": id, "object": "subscription", "customer": customer, "status": status,
		"current_period_start": start, "current_period_end": end, "cancel_at_period_end": false, "metadata": map[string]any{},
		"items": map[string]any{"object": "list", "data": data, "has_more": false}, "latest_invoice": nil, "pause_collection": nil}
}

func (f *fakeStripe) setSub(s map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs[s["id"].(string)] = s
}

func (f *fakeStripe) postsTo(path string) []fakePost {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakePost
	for _, p := range f.posts {
		if p.Path == path {
			out = append(out, p)
		}
	}
	return out
}

func stripeErr(w http.ResponseWriter, code int, typ, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"type": typ, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
	return b
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	path := r.URL.Path
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/v1/subscriptions/"):
		f.gets++
		s, ok := f.subs[strings.TrimPrefix(path, "/v1/subscriptions/")]
		if !ok {
			stripeErr(w, http.StatusNotFound, "invalid_request_error", "No such subscription")
			return
		}
		writeJSON(w, s)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/v1/prices/"):
		p, ok := f.prices[strings.TrimPrefix(path, "/v1/prices/")]
		if !ok {
			stripeErr(w, http.StatusNotFound, "invalid_request_error", "No such price")
			return
		}
		writeJSON(w, p)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/v1/billing/meters/"):
		m, ok := f.meters[strings.TrimPrefix(path, "/v1/billing/meters/")]
		if !ok {
			stripeErr(w, http.StatusNotFound, "invalid_request_error", "No such billing meter")
			return
		}
		writeJSON(w, m)
	case r.Method == http.MethodPost && path == "/v1/billing/meter_events":
		// metering's report (the end-to-end credit test): accepted and kept.
		form, _ := url.ParseQuery(string(body))
		f.posts = append(f.posts, fakePost{Path: path, Form: form})
		writeJSON(w, map[string]any{"object": "billing.meter_event", "event_name": form.Get("event_name"), "identifier": form.Get("identifier"),
			"livemode": false, "payload": map[string]any{}, "created": 1, "timestamp": 1})
	case r.Method == http.MethodGet && path == "/v1/subscriptions":
		list := []any{}
		for _, s := range f.subs {
			if s["customer"] == r.URL.Query().Get("customer") {
				list = append(list, s)
			}
		}
		writeJSON(w, map[string]any{"object": "list", "data": list, "has_more": false, "url": "/v1/subscriptions"})
	case r.Method == http.MethodGet && path == "/v1/entitlements/active_entitlements":
		data := []any{}
		for _, k := range f.features[r.URL.Query().Get("customer")] {
			data = append(data, map[string]any{"id": "ent_" + k, "object": "entitlements.active_entitlement", "lookup_key": k, "feature": "feat_" + k})
		}
		writeJSON(w, map[string]any{"object": "list", "data": data, "has_more": false, "url": path})
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/v1/subscriptions/"):
		form, _ := url.ParseQuery(string(body))
		key := r.Header.Get("Idempotency-Key")
		f.posts = append(f.posts, fakePost{Path: path, Form: form, Key: key})
		if a, ok := f.saved[key]; ok && key != "" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(a.code)
			_, _ = w.Write(a.body)
			return
		}
		if f.validate != "" {
			req, _ := http.NewRequest(http.MethodPost, f.validate+path, bytes.NewReader(body))
			req.Header.Set("Authorization", r.Header.Get("Authorization"))
			req.Header.Set("Content-Type", r.Header.Get("Content-Type"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				f.t.Errorf("stripe-mock: %v", err)
			} else {
				vb, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode >= 400 {
					f.t.Errorf("stripe-mock refused the request %s %s: %d %s", path, body, resp.StatusCode, vb)
				}
			}
		}
		if f.failNext > 0 {
			f.failNext--
			// Stripe saves a 500 under its key and replays it for 24 hours.
			f.saved[key] = fakeAnswer{f.failCode, stripeErr(w, f.failCode, "api_error", fmt.Sprintf("fake Stripe error %d", f.failCode))}
			return
		}
		id := strings.TrimPrefix(path, "/v1/subscriptions/")
		s, ok := f.subs[id]
		if !ok {
			f.saved[key] = fakeAnswer{404, stripeErr(w, http.StatusNotFound, "invalid_request_error", "No such subscription: '"+id+"'")}
			return
		}
		out := map[string]any{}
		for k, v := range s {
			out[k] = v
		}
		if f.pending {
			out["pending_update"] = map[string]any{"expires_at": 1, "subscription_items": []any{}}
		} else if itemID, price := form.Get("items[0][id]"), form.Get("items[0][price]"); price != "" {
			for _, it := range s["items"].(map[string]any)["data"].([]any) {
				m := it.(map[string]any)
				if m["id"] == itemID {
					m["price"] = map[string]any{"id": price, "object": "price"}
				}
			}
		}
		b, _ := json.Marshal(out)
		f.saved[key] = fakeAnswer{200, b}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	default:
		stripeErr(w, http.StatusNotFound, "invalid_request_error", "Unrecognized request URL ("+r.Method+" "+path+") in the fake Stripe")
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
