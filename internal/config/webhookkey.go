package config

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
)

// WebhookKeyFile is where TOLLGATE_DEV keeps the WEBHOOK_SECRET_KEY it
// generates, under DataDir, shared by the api and the worker of a checkout.
const WebhookKeyFile = "webhook_secret_key"

// parseWebhookKey reads WEBHOOK_SECRET_KEY: 32 bytes in base64.
func parseWebhookKey(v string) ([]byte, error) {
	if v == "" {
		return nil, nil
	}
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return nil, fmt.Errorf("want 32 bytes in base64 (openssl rand -base64 32): %w", err)
	}
	if len(k) != 32 {
		return nil, fmt.Errorf("want 32 bytes in base64 (openssl rand -base64 32), got %d bytes", len(k))
	}
	return k, nil
}

// ResolveWebhookSecretKey makes sure WebhookSecretKey is set when it can
// be: from WEBHOOK_SECRET_KEY, or in development (Dev) from
// DataDir/webhook_secret_key, created once. It returns the file it used (""
// otherwise). In production an empty key is not an error: the webhook
// endpoints' routes answer 503 saying what to set, and nothing else needs
// it.
func (c *Config) ResolveWebhookSecretKey() (string, error) {
	if c.WebhookSecretKey != nil || !c.Dev {
		return "", nil
	}
	path := filepath.Join(c.DataDir, WebhookKeyFile)
	v, err := readOrCreate(path, func() string {
		var b [32]byte
		_, _ = rand.Read(b[:])
		return base64.StdEncoding.EncodeToString(b[:])
	})
	if err != nil {
		return "", &Error{Var: "WEBHOOK_SECRET_KEY", Err: fmt.Errorf("TOLLGATE_DEV: %w", err)}
	}
	k, err := parseWebhookKey(v)
	if err != nil {
		return "", &Error{Var: "WEBHOOK_SECRET_KEY", Err: fmt.Errorf("%s: %w", path, err)}
	}
	c.WebhookSecretKey = k
	return path, nil
}
