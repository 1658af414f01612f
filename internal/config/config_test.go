package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// The retention defaults are the documented ones, each can be changed, and
// a value under its minimum is refused naming the variable.
func TestRetentionDefaultsOverridesAndMinimums(t *testing.T) {
	c, err := Load(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	for name, got := range map[string]time.Duration{
		"USAGE_EVENTS_RETENTION":         c.UsageEventsRetention,
		"STRIPE_EVENTS_RETENTION":        c.StripeEventsRetention,
		"ENTITLEMENT_VERSIONS_RETENTION": c.EntitlementVersionsRetention,
		"EXPIRED_OVERRIDES_RETENTION":    c.ExpiredOverridesRetention,
	} {
		want := map[string]time.Duration{"USAGE_EVENTS_RETENTION": 90 * day, "STRIPE_EVENTS_RETENTION": 90 * day,
			"ENTITLEMENT_VERSIONS_RETENTION": 180 * day, "EXPIRED_OVERRIDES_RETENTION": 30 * day}[name]
		if got != want {
			t.Errorf("%s default = %s, want %s", name, got, want)
		}
	}
	c, err = Load(envOf(map[string]string{"USAGE_EVENTS_RETENTION": "1000h", "STRIPE_EVENTS_RETENTION": "800h",
		"ENTITLEMENT_VERSIONS_RETENTION": "48h", "EXPIRED_OVERRIDES_RETENTION": "0s"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.UsageEventsRetention != 1000*time.Hour || c.StripeEventsRetention != 800*time.Hour ||
		c.EntitlementVersionsRetention != 48*time.Hour || c.ExpiredOverridesRetention != 0 {
		t.Errorf("overrides not applied: %+v", c)
	}
	for name, v := range map[string]string{
		"USAGE_EVENTS_RETENTION":         "800h", // under 36 days: a replayed event could count twice
		"STRIPE_EVENTS_RETENTION":        "700h", // under 31 days: a redelivered event would apply again
		"ENTITLEMENT_VERSIONS_RETENTION": "30m",
		"EXPIRED_OVERRIDES_RETENTION":    "-1h",
		"USAGE_EVENTS_RETENTION ":        "",
	} {
		name = strings.TrimSpace(name)
		if v == "" {
			v = "ninety days"
		}
		_, err := Load(envOf(map[string]string{name: v}))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: err = %v, want one naming %s", name, v, err, name)
		}
	}
}
func TestAdminTokens(t *testing.T) {
	c, err := Load(func(k string) string {
		return map[string]string{"ADMIN_TOKENS": " alice:tga_alice_0123456789 , bob:tga_bob_0123456789abc"}[k]
	})
	if err != nil || c.AdminTokens["alice"] != "tga_alice_0123456789" || c.AdminTokens["bob"] != "tga_bob_0123456789abc" || len(c.AdminTokens) != 2 {
		t.Fatalf("%v %v", c.AdminTokens, err)
	}
	for _, bad := range []string{"alice", "alice:short", "al ice:tga_alice_0123456789", "admin:tga_admin_0123456789",
		"a:tga_same_0123456789,b:tga_same_0123456789", "a:tga_a_0123456789xx,a:tga_b_0123456789xx"} {
		_, err := Load(func(k string) string { return map[string]string{"ADMIN_TOKENS": bad}[k] })
		if err == nil || !strings.Contains(err.Error(), "ADMIN_TOKENS") {
			t.Errorf("%q: %v, want an error naming ADMIN_TOKENS", bad, err)
		}
	}
}

// REDIS_TIMEOUT defaults to 250ms, can be changed, and is a positive
// duration.
func TestRedisTimeout(t *testing.T) {
	c, err := Load(envOf(nil))
	if err != nil || c.RedisTimeout != 250*time.Millisecond {
		t.Fatalf("default REDIS_TIMEOUT = %v (%v), want 250ms", c.RedisTimeout, err)
	}
	if c, err = Load(envOf(map[string]string{"REDIS_TIMEOUT": "1s"})); err != nil || c.RedisTimeout != time.Second {
		t.Fatalf("REDIS_TIMEOUT=1s: %v (%v)", c.RedisTimeout, err)
	}
	for _, v := range []string{"0", "-1s", "soon"} {
		if _, err := Load(envOf(map[string]string{"REDIS_TIMEOUT": v})); err == nil || !strings.Contains(err.Error(), "REDIS_TIMEOUT") {
			t.Errorf("REDIS_TIMEOUT=%s: err = %v, want one naming REDIS_TIMEOUT", v, err)
		}
	}
}

// LEASE_TTL defaults to 60s, can be changed, and is at least a second.
func TestLeaseTTL(t *testing.T) {
	c, err := Load(envOf(nil))
	if err != nil || c.LeaseTTL != time.Minute {
		t.Fatalf("default LEASE_TTL = %v (%v), want 1m", c.LeaseTTL, err)
	}
	if c, err = Load(envOf(map[string]string{"LEASE_TTL": "5m"})); err != nil || c.LeaseTTL != 5*time.Minute {
		t.Fatalf("LEASE_TTL=5m: %v (%v)", c.LeaseTTL, err)
	}
	for _, v := range []string{"500ms", "-1s", "a minute"} {
		if _, err := Load(envOf(map[string]string{"LEASE_TTL": v})); err == nil || !strings.Contains(err.Error(), "LEASE_TTL") {
			t.Errorf("LEASE_TTL=%s: err = %v, want one naming LEASE_TTL", v, err)
		}
	}
}

// LIMITER_PREFETCH is off unless asked for, and anything but a boolean
// is refused naming the variable; LIMITER_LOCAL_LEASES, its old name, is
// still read when LIMITER_PREFETCH is unset, and named in Deprecated.
func TestLimiterPrefetch(t *testing.T) {
	c, err := Load(envOf(nil))
	if err != nil || c.LimiterPrefetch || len(c.Deprecated) != 0 {
		t.Fatalf("default LIMITER_PREFETCH = %v, deprecated %v (%v), want false", c.LimiterPrefetch, c.Deprecated, err)
	}
	if c, err = Load(envOf(map[string]string{"LIMITER_PREFETCH": "true"})); err != nil || !c.LimiterPrefetch || len(c.Deprecated) != 0 {
		t.Fatalf("LIMITER_PREFETCH=true: %v %v (%v)", c.LimiterPrefetch, c.Deprecated, err)
	}
	if _, err := Load(envOf(map[string]string{"LIMITER_PREFETCH": "sometimes"})); err == nil || !strings.Contains(err.Error(), "LIMITER_PREFETCH") {
		t.Fatalf("LIMITER_PREFETCH=sometimes: err = %v, want one naming LIMITER_PREFETCH", err)
	}
	c, err = Load(envOf(map[string]string{"LIMITER_LOCAL_LEASES": "true"}))
	if err != nil || !c.LimiterPrefetch || len(c.Deprecated) != 1 || !strings.Contains(c.Deprecated[0], "LIMITER_PREFETCH") {
		t.Fatalf("LIMITER_LOCAL_LEASES=true: %v %v (%v), want prefetch on and a deprecation", c.LimiterPrefetch, c.Deprecated, err)
	}
	if _, err := Load(envOf(map[string]string{"LIMITER_LOCAL_LEASES": "sometimes"})); err == nil || !strings.Contains(err.Error(), "LIMITER_LOCAL_LEASES") {
		t.Fatalf("LIMITER_LOCAL_LEASES=sometimes: err = %v, want one naming LIMITER_LOCAL_LEASES", err)
	}
	// The new name wins when both are set.
	if c, err = Load(envOf(map[string]string{"LIMITER_PREFETCH": "false", "LIMITER_LOCAL_LEASES": "true"})); err != nil || c.LimiterPrefetch {
		t.Fatalf("both set: %v (%v), want LIMITER_PREFETCH's false", c.LimiterPrefetch, err)
	}
}

// BILLING_CONTACT is optional, and when set an email address or an http(s)
// URL, the two things the dashboard can link to.
func TestBillingContact(t *testing.T) {
	c, err := Load(envOf(nil))
	if err != nil || c.BillingContact != "" {
		t.Fatalf("default BILLING_CONTACT = %q (%v), want empty", c.BillingContact, err)
	}
	for _, v := range []string{"billing@example.com", "https://example.com/contact", "http://intranet/billing"} {
		if c, err := Load(envOf(map[string]string{"BILLING_CONTACT": v})); err != nil || c.BillingContact != v {
			t.Errorf("BILLING_CONTACT=%s: %q (%v)", v, c.BillingContact, err)
		}
	}
	for _, v := range []string{"Alice", "javascript:alert(1)", "ftp://example.com", "Alice <alice@example.com>", "mailto:a@b.c", "a@b.c\x00"} {
		if _, err := Load(envOf(map[string]string{"BILLING_CONTACT": v})); err == nil || !strings.Contains(err.Error(), "BILLING_CONTACT") {
			t.Errorf("BILLING_CONTACT=%q: err = %v, want one naming BILLING_CONTACT", v, err)
		}
	}
}

// LIMITER_BATCHING is off unless asked for, and anything but a boolean
// stops the process naming it.
func TestLimiterBatching(t *testing.T) {
	c, err := Load(envOf(nil))
	if err != nil || c.LimiterBatching {
		t.Fatalf("default LIMITER_BATCHING = %v (%v), want false", c.LimiterBatching, err)
	}
	if c, err = Load(envOf(map[string]string{"LIMITER_BATCHING": "true"})); err != nil || !c.LimiterBatching {
		t.Fatalf("LIMITER_BATCHING=true: %v (%v)", c.LimiterBatching, err)
	}
	if _, err := Load(envOf(map[string]string{"LIMITER_BATCHING": "often"})); err == nil || !strings.Contains(err.Error(), "LIMITER_BATCHING") {
		t.Fatalf("LIMITER_BATCHING=often: err = %v, want one naming LIMITER_BATCHING", err)
	}
}

// DATABASE_MAX_CONNS (the pool's size) and DATABASE_TIMEOUT (the api's
// request deadline on Postgres) have their documented defaults, take a
// value, and refuse a bad one naming the variable.
func TestDatabasePoolAndTimeout(t *testing.T) {
	c, err := Load(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseMaxConns != 10 || c.DatabaseTimeout != 5*time.Second {
		t.Errorf("defaults: DATABASE_MAX_CONNS %d, DATABASE_TIMEOUT %s; want 10, 5s", c.DatabaseMaxConns, c.DatabaseTimeout)
	}
	c, err = Load(envOf(map[string]string{"DATABASE_MAX_CONNS": "32", "DATABASE_TIMEOUT": "750ms"}))
	if err != nil || c.DatabaseMaxConns != 32 || c.DatabaseTimeout != 750*time.Millisecond {
		t.Errorf("set: %d %s %v", c.DatabaseMaxConns, c.DatabaseTimeout, err)
	}
	for name, v := range map[string]string{"DATABASE_MAX_CONNS": "1", "DATABASE_TIMEOUT": "10ms"} {
		if _, err := Load(envOf(map[string]string{name: v})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: err = %v, want one naming it", name, v, err)
		}
	}
	for _, v := range []string{"many", "-3", "99999999999"} {
		if _, err := Load(envOf(map[string]string{"DATABASE_MAX_CONNS": v})); err == nil || !strings.Contains(err.Error(), "DATABASE_MAX_CONNS") {
			t.Errorf("DATABASE_MAX_CONNS=%s: err = %v", v, err)
		}
	}
}

// TOLLGATE_DEV without ADMIN_TOKEN resolves the token from the data
// directory's file, creating it once; without TOLLGATE_DEV it is an error
// naming ADMIN_TOKEN; a set ADMIN_TOKEN wins.
func TestResolveAdminToken(t *testing.T) {
	dir := t.TempDir()
	c, err := Load(envOf(map[string]string{"TOLLGATE_DEV": "true", "TOLLGATE_DATA": dir}))
	if err != nil {
		t.Fatal(err)
	}
	c2 := c
	f1, err1 := c.ResolveAdminToken()
	f2, err2 := c2.ResolveAdminToken()
	if err1 != nil || err2 != nil || f1 == "" || f1 != f2 || c.AdminToken == "" || c.AdminToken != c2.AdminToken {
		t.Fatalf("dev: %q %v, %q %v; tokens %q %q", f1, err1, f2, err2, c.AdminToken, c2.AdminToken)
	}
	c, _ = Load(envOf(nil))
	if _, err := c.ResolveAdminToken(); err == nil || !strings.Contains(err.Error(), "ADMIN_TOKEN") || strings.Contains(err.Error(), "\n") {
		t.Errorf("no token, no dev: %v, want one line naming ADMIN_TOKEN", err)
	}
	c, _ = Load(envOf(map[string]string{"ADMIN_TOKEN": "tga_set", "TOLLGATE_DEV": "true", "TOLLGATE_DATA": t.TempDir()}))
	if f, err := c.ResolveAdminToken(); f != "" || err != nil || c.AdminToken != "tga_set" {
		t.Errorf("set token: %q %v %q", f, err, c.AdminToken)
	}
	if _, err := Load(envOf(map[string]string{"TOLLGATE_DEV": "yes please"})); err == nil || !strings.Contains(err.Error(), "TOLLGATE_DEV") {
		t.Errorf("TOLLGATE_DEV=yes please: %v", err)
	}
}

// METRICS_ADDR defaults to loopback (nothing public by default), takes off;
// METRICS_TOKEN must be long enough to be a secret.
func TestMetricsAddrAndToken(t *testing.T) {
	c, err := Load(envOf(nil))
	if err != nil || c.MetricsAddr != "127.0.0.1:9464" || c.MetricsToken != "" {
		t.Fatalf("defaults: %q %q %v", c.MetricsAddr, c.MetricsToken, err)
	}
	c, err = Load(envOf(map[string]string{"METRICS_ADDR": "off", "METRICS_TOKEN": "0123456789abcdef"}))
	if err != nil || c.MetricsAddr != "" || c.MetricsToken != "0123456789abcdef" {
		t.Fatalf("off: %q %q %v", c.MetricsAddr, c.MetricsToken, err)
	}
	for name, v := range map[string]string{"METRICS_ADDR": "9464", "METRICS_TOKEN": "short"} {
		if _, err := Load(envOf(map[string]string{name: v})); err == nil || !strings.Contains(err.Error(), name) || strings.Contains(err.Error(), v+" ") {
			t.Errorf("%s=%s: %v, want an error naming it", name, v, err)
		}
	}
}

// Webhook settings: https and public addresses only by default, the
// documented backoff, and bad values refused naming their variable.
func TestWebhookSettings(t *testing.T) {
	c, err := Load(envOf(nil))
	if err != nil || c.WebhookAllowHTTP || c.WebhookAllowPrivate {
		t.Fatalf("defaults %v %v (%v), want both false", c.WebhookAllowHTTP, c.WebhookAllowPrivate, err)
	}
	want := []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour, 10 * time.Hour}
	if !slices.Equal(c.WebhookRetryBackoff, want) {
		t.Errorf("default backoff %v, want %v", c.WebhookRetryBackoff, want)
	}
	c, err = Load(envOf(map[string]string{"WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOW_PRIVATE": "true", "WEBHOOK_RETRY_BACKOFF": "10ms, 1s"}))
	if err != nil || !c.WebhookAllowHTTP || !c.WebhookAllowPrivate || !slices.Equal(c.WebhookRetryBackoff, []time.Duration{10 * time.Millisecond, time.Second}) {
		t.Fatalf("set: %+v %v", c.WebhookRetryBackoff, err)
	}
	for name, v := range map[string]string{"WEBHOOK_ALLOW_HTTP": "yes please", "WEBHOOK_ALLOW_PRIVATE": "maybe",
		"WEBHOOK_RETRY_BACKOFF": "5s,,5m"} {
		if _, err := Load(envOf(map[string]string{name: v})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: %v, want an error naming it", name, v, err)
		}
	}
	for _, v := range []string{"-5s", "5", strings.Repeat("1s,", 20) + "1s"} {
		if _, err := Load(envOf(map[string]string{"WEBHOOK_RETRY_BACKOFF": v})); err == nil {
			t.Errorf("WEBHOOK_RETRY_BACKOFF=%q accepted", v)
		}
	}
}
