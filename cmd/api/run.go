package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/httpapi"
	"github.com/tollgatehq/tollgate/internal/logging"
	"github.com/tollgatehq/tollgate/internal/postgres"
)

const usage = `usage: api [serve|migrate|seed-demo]

  serve      apply migrations (unless MIGRATE_ON_START=false) and serve HTTP (default)
  migrate    create the database if missing and apply every migration
  seed-demo  create the demo plans, tenant and API key; print how to use them
`

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitConfig = 2 // bad configuration or usage
)

// run is main without the process: tests call it with their own args,
// environment and writers, and cancel ctx to stop it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	if cmd == "-h" || cmd == "--help" || cmd == "help" {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitConfig
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken, cfg.AdminTokenGenerated = randomToken(), true
	}
	log := logging.New(stderr, cfg.LogLevel)
	switch cmd {
	case "migrate":
		err = migrate(ctx, cfg, log)
	case "serve":
		err = serve(ctx, cfg, log, nil)
	case "seed-demo":
		err = seedDemo(ctx, cfg, log, stdout)
	default:
		fmt.Fprintf(stderr, "api: unknown command %q\n%s", cmd, usage)
		return exitConfig
	}
	if err != nil {
		log.Error("api failed", "command", cmd, "err", err)
		return exitFailed
	}
	return exitOK
}

func migrate(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	if err := postgres.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	return postgres.Migrate(ctx, cfg.DatabaseURL, log)
}

// serve runs the HTTP server until ctx ends. ready, when not nil, gets the
// bound address (tests listen on :0).
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, ready func(string)) error {
	if cfg.MigrateOnStart {
		if err := migrate(ctx, cfg, log); err != nil {
			return err
		}
	}
	pool, err := postgres.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	rdb, err := cfg.NewRedis()
	if err != nil {
		return err
	}
	defer rdb.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.AdminTokenGenerated {
		// Logged once, on purpose: without it nobody could use the admin API.
		log.Warn("ADMIN_TOKEN is empty; generated one for this process", "admin_token", cfg.AdminToken)
	}
	srv, err := httpapi.NewServer(httpapi.Deps{Log: log, DB: pool, Redis: rdb, Registry: reg, AdminToken: cfg.AdminToken})
	if err != nil {
		return err
	}
	return httpapi.ListenAndServe(ctx, srv, cfg.HTTPAddr, cfg.ShutdownTimeout, func(addr string) {
		log.Info("api listening", "addr", addr)
		if ready != nil {
			ready(addr)
		}
	})
}

func seedDemo(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer) error {
	return errors.New("seed-demo: not wired yet")
}

func randomToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "tga_" + hex.EncodeToString(b[:])
}
