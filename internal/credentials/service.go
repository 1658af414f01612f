package credentials

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Options configure a Service. Every field has a usable zero value.
type Options struct {
	// Redis, when set, carries API key revocations between instances (pub/sub
	// on "<prefix>:keys:revoked"); Run must be running for Authenticate to
	// cache. Without it every Authenticate reads Postgres.
	Redis redis.UniversalClient
	// Prefix is the Redis key prefix of the revocation channel; default the
	// limiter's, "tg".
	Prefix string
	// KeyCacheTTL bounds how long a known API key is trusted without asking
	// Postgres; default 30s.
	KeyCacheTTL time.Duration
	// NegativeCacheTTL bounds how long an unknown key stays unknown without
	// asking Postgres; default 2s.
	NegativeCacheTTL time.Duration
	// LastUsedEvery is how often last_used_at of one key is written at most;
	// default 1 minute.
	LastUsedEvery time.Duration
	// RedisTimeout bounds each attempt of a publish after a commit (a new
	// or revoked API key); default 250ms. The change is committed in
	// Postgres by then, so a Redis that does not answer costs the request
	// at most three attempts, never go-redis's seconds of retries.
	RedisTimeout time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Service issues, lists, revokes and checks API keys and service tokens.
type Service struct {
	db *pgxpool.Pool
	// tenants is asked whether a tenant exists before its keys are issued
	// or listed (the dependency runs credentials → entitlements only).
	tenants *entitlements.Service
	log     *slog.Logger
	opts    Options
	keys    *keyCache
	index   keyIndex
	// unsent holds revocations (key hash → revoked at) whose publish
	// failed; Run publishes them again until they are sent or every
	// instance's cache has expired them anyway (KeyCacheTTL).
	unsentMu sync.Mutex
	unsent   map[string]time.Time
	// lastUsed holds the last_used_at writes Run makes off the request path.
	lastUsed lastUsedWriter
	// refreshQ takes the hashes of cached keys due to be read again ahead
	// of their expiry (keyrefresh.go); Run reads them.
	refreshQ  chan []byte
	refreshed atomic.Int64
}

// New builds the service; tenants answers whether a tenant exists.
func New(db *pgxpool.Pool, tenants *entitlements.Service, log *slog.Logger, opts Options) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Prefix == "" {
		opts.Prefix = keyspace.DefaultPrefix
	}
	if opts.KeyCacheTTL == 0 {
		opts.KeyCacheTTL = 30 * time.Second
	}
	if opts.NegativeCacheTTL == 0 {
		opts.NegativeCacheTTL = 2 * time.Second
	}
	if opts.LastUsedEvery == 0 {
		opts.LastUsedEvery = time.Minute
	}
	if opts.RedisTimeout <= 0 {
		opts.RedisTimeout = 250 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Service{db: db, tenants: tenants, log: log, opts: opts, keys: newKeyCache(),
		unsent: map[string]time.Time{}, refreshQ: make(chan []byte, refreshQueue)}
}

// RevokedChannel is the Redis pub/sub channel of API key revocations.
func (s *Service) RevokedChannel() string { return s.opts.Prefix + ":keys:revoked" }

// Run keeps the revocation subscription alive until ctx ends. While it is
// subscribed, Authenticate may answer from its cache; whenever the
// subscription is lost the cache is dropped and bypassed until it is back,
// because a revocation published meanwhile would be missed. It also writes
// the API keys' last_used_at, batched, once a second (lastUsedWriter), and
// reads again the cached keys that are in use before they expire
// (runKeyRefresh).
func (s *Service) Run(ctx context.Context) error {
	used := make(chan struct{})
	go func() { defer close(used); s.runLastUsed(ctx) }()
	defer func() { <-used }()
	if s.opts.Redis == nil {
		<-ctx.Done()
		return nil
	}
	resent := make(chan struct{})
	go func() { defer close(resent); s.resendRevocations(ctx) }()
	defer func() { <-resent }()
	refreshed := make(chan struct{})
	go func() { defer close(refreshed); s.runKeyRefresh(ctx) }()
	defer func() { <-refreshed }()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.subscribeOnce(ctx)
		s.keys.setLive(false)
		s.index.setDown()
		if ctx.Err() != nil {
			break
		}
		s.log.WarnContext(ctx, "api key revocation subscription lost", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	return nil
}

func (s *Service) subscribeOnce(ctx context.Context) error {
	ps := s.opts.Redis.Subscribe(ctx, s.RevokedChannel())
	// go-redis does not interrupt a blocked read when ctx ends; closing does.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	defer ps.Close()
	// The subscription confirmation proves we will hear every later
	// revocation; only then may the cache be trusted.
	if _, err := ps.Receive(ctx); err != nil {
		return err
	}
	s.keys.setLive(true)
	// Keys issued before this point are in the load; later ones arrive as
	// "+<hash>" messages, buffered while the load runs.
	if err := s.loadKeyIndex(ctx); err != nil {
		s.log.WarnContext(ctx, "api key index not loaded; unknown keys are looked up in Postgres", "err", err)
	}
	for {
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		if h, ok := strings.CutPrefix(msg.Payload, "+"); ok {
			if id, ok := indexIDHex(h); ok {
				s.index.add(id)
			}
			continue
		}
		s.keys.revoke(msg.Payload)
		if id, ok := indexIDHex(msg.Payload); ok {
			s.index.remove(id)
		}
	}
}

// KeyCacheLive reports whether Authenticate currently answers from its
// cache (tests poll it before measuring).
func (s *Service) KeyCacheLive() bool { return s.keys.isLive() }
