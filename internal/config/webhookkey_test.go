package config

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

// WEBHOOK_SECRET_KEY is 32 bytes of base64; empty in development it is
// made once in the data directory and shared by every process; empty in
// production it stays empty (the endpoints' routes then answer 503).
func TestWebhookSecretKey(t *testing.T) {
	key := bytes.Repeat([]byte{3}, 32)
	c, err := Load(envOf(map[string]string{"WEBHOOK_SECRET_KEY": base64.StdEncoding.EncodeToString(key)}))
	if err != nil || !bytes.Equal(c.WebhookSecretKey, key) {
		t.Fatalf("%x %v", c.WebhookSecretKey, err)
	}
	for _, bad := range []string{"not base64!", base64.StdEncoding.EncodeToString(key[:16])} {
		if _, err := Load(envOf(map[string]string{"WEBHOOK_SECRET_KEY": bad})); err == nil || !strings.Contains(err.Error(), "WEBHOOK_SECRET_KEY") {
			t.Errorf("%q: %v, want an error naming WEBHOOK_SECRET_KEY", bad, err)
		}
	}
	dir := t.TempDir()
	c, _ = Load(envOf(map[string]string{"TOLLGATE_DEV": "true", "TOLLGATE_DATA": dir}))
	c2 := c
	f1, err1 := c.ResolveWebhookSecretKey()
	f2, err2 := c2.ResolveWebhookSecretKey()
	if err1 != nil || err2 != nil || f1 == "" || f1 != f2 || len(c.WebhookSecretKey) != 32 || !bytes.Equal(c.WebhookSecretKey, c2.WebhookSecretKey) {
		t.Fatalf("dev: %q %v, %q %v", f1, err1, f2, err2)
	}
	c, _ = Load(envOf(nil))
	if f, err := c.ResolveWebhookSecretKey(); f != "" || err != nil || c.WebhookSecretKey != nil {
		t.Fatalf("production without a key: %q %v %x", f, err, c.WebhookSecretKey)
	}
}
