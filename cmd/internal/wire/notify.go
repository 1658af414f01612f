package wire

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/notify"
)

// Notify builds the webhook service with the same settings in both
// commands: the api checks endpoint URLs with them, the worker sends. Both
// need the key that seals the endpoints' secrets (WEBHOOK_SECRET_KEY; in
// development one kept in the data directory).
func Notify(pool *pgxpool.Pool, cfg config.Config, log *slog.Logger) (*notify.Service, error) {
	file, err := cfg.ResolveWebhookSecretKey()
	if err != nil {
		return nil, err
	}
	switch {
	case file != "":
		log.Warn("WEBHOOK_SECRET_KEY is empty; TOLLGATE_DEV uses the key in this file", "webhook_secret_key_file", file)
	case cfg.WebhookSecretKey == nil:
		log.Warn("WEBHOOK_SECRET_KEY is empty: webhook endpoints cannot be created and their deliveries cannot be signed until it is set")
	}
	return notify.NewService(pool, log, notify.Options{
		AllowHTTP:    cfg.WebhookAllowHTTP,
		AllowPrivate: cfg.WebhookAllowPrivate,
		Backoff:      cfg.WebhookRetryBackoff,
		SecretKey:    cfg.WebhookSecretKey,
	})
}
