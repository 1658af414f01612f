package config

import (
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
