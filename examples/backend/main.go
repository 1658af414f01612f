// Command backend is an example SaaS backend that enforces Tollgate plans
// with the limiter package alone: every request passes the limiter's
// middleware (cost 1 on the meter "requests") for the tenant named by the
// X-Tenant-ID header, and answers 200 with the rate-limit headers, or 429
// with Retry-After once the tenant is out of its plan.
//
// It needs Redis (the one Tollgate writes snapshots to) and Tollgate's API
// for what Redis loses; no database:
//
//	REDIS_URL       redis://127.0.0.1:6379/0
//	TOLLGATE_URL    Tollgate's api, e.g. http://127.0.0.1:8080 (required)
//	TOLLGATE_TOKEN  a service token (POST /admin/v1/service-tokens) or ADMIN_TOKEN (required)
//	HTTP_ADDR       127.0.0.1:8081
//	TOLLGATE_WEBHOOK_SECRET  an endpoint's whsec_… secret (POST /admin/v1/webhook-endpoints);
//	                set, POST /webhooks/tollgate verifies and logs Tollgate's events
//
// Build and run: go build ./examples/backend && ./backend
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
	"github.com/tollgatehq/tollgate/limiter/remote"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), os.Getenv, log); err != nil {
		log.Error("backend stopped", "err", err)
		var ce configError
		if errors.As(err, &ce) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type configError struct{ v, msg string }

func (e configError) Error() string { return e.v + ": " + e.msg }

func run(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	opt, err := redis.ParseURL(env("REDIS_URL", "redis://127.0.0.1:6379/0"))
	if err != nil {
		return configError{"REDIS_URL", err.Error()}
	}
	// go-redis enforces the limiter's per-call deadline itself (no goroutine
	// per call) only with ContextTimeoutEnabled.
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	defer rdb.Close()

	tg, err := remote.New(getenv("TOLLGATE_URL"), getenv("TOLLGATE_TOKEN"), remote.Options{})
	if err != nil {
		return configError{"TOLLGATE_URL/TOLLGATE_TOKEN", err.Error()}
	}
	lim, err := limiter.New(rdb, limiter.Options{
		Loader:      tg.Snapshot, // a snapshot Redis lost comes back from Tollgate
		UsageLoader: tg.Usage,    // so does a lost quota counter: never a fresh quota
		GrantLoader: tg.Grants,   // and lost credit grants: never free units, none taken away
		Hooks: limiter.Hooks{
			OnLoaderError: func(loader string, err error) { log.Warn("tollgate did not answer", "loader", loader, "err", err) },
			OnRedisError:  func(op string, err error) { log.Warn("redis failed", "op", op, "err", err) },
		},
	})
	if err != nil {
		return configError{"limiter", err.Error()}
	}
	defer lim.Close()

	tenantOf := func(r *http.Request) (string, limiter.Request, error) {
		// An empty or malformed id is ErrInvalidRequest (400), an id
		// Tollgate does not know ErrUnknownTenant (401).
		return r.Header.Get("X-Tenant-ID"), limiter.Request{Cost: 1, Meter: "requests"}, nil
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plan := ""
		if d, ok := limithttp.DecisionFromContext(r.Context()); ok {
			plan = d.Plan
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"tenant": r.Header.Get("X-Tenant-ID"), "plan": plan, "path": r.URL.Path})
	})
	mux := http.NewServeMux()
	mux.Handle("/", limithttp.Middleware(lim, tenantOf)(app))
	if secret := getenv("TOLLGATE_WEBHOOK_SECRET"); secret != "" {
		recv, err := receiver(secret, log)
		if err != nil {
			return configError{"TOLLGATE_WEBHOOK_SECRET", err.Error()}
		}
		// Outside the limiter: Tollgate's deliveries are not a tenant's traffic.
		mux.Handle("POST /webhooks/tollgate", recv)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	ln, err := net.Listen("tcp", env("HTTP_ADDR", "127.0.0.1:8081"))
	if err != nil {
		return fmt.Errorf("HTTP_ADDR: %w", err)
	}
	log.Info("backend listening", "addr", ln.Addr().String())
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// receiver verifies Tollgate's deliveries (Standard Webhooks signatures, with
// the timestamp tolerance that stops replays) and logs each event. A
// delivery that does not verify is answered 400 so that it shows as failed in
// Tollgate; any 2xx marks it delivered, so answer only once it is handled.
func receiver(secret string, log *slog.Logger) (http.Handler, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if err := wh.Verify(body, r.Header); err != nil {
			log.Warn("tollgate webhook refused", "err", err)
			http.Error(w, "signature does not verify", http.StatusBadRequest)
			return
		}
		var ev struct {
			ID   string          `json:"id"`
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, "not a Tollgate event", http.StatusBadRequest)
			return
		}
		log.Info("tollgate event", "id", ev.ID, "type", ev.Type, "webhook_id", r.Header.Get("webhook-id"), "data", string(ev.Data))
		w.WriteHeader(http.StatusNoContent)
	}), nil
}
