package wire

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/notify"
)

// Notify builds the webhook service with the same settings in both
// commands: the api checks endpoint URLs with them, the worker sends.
func Notify(pool *pgxpool.Pool, cfg config.Config, log *slog.Logger) (*notify.Service, error) {
	return notify.NewService(pool, log, notify.Options{
		AllowHTTP:    cfg.WebhookAllowHTTP,
		AllowPrivate: cfg.WebhookAllowPrivate,
		Backoff:      cfg.WebhookRetryBackoff,
	})
}
