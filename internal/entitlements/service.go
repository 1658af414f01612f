package entitlements

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Options configure a Service. Every field has a usable zero value.
type Options struct {
	// DefaultPlan is the plan of tenants whose subscription ended; default "free".
	DefaultPlan string
	// GracePeriod is how long past_due keeps the plan when the subscription
	// row carries no grace_ends_at; default 7 days.
	GracePeriod time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Redis, when set, carries API key revocations between instances (pub/sub
	// on "<prefix>:keys:revoked"); Run must be running for Authenticate to
	// cache. Without it every Authenticate reads Postgres.
	Redis redis.UniversalClient
	// Prefix is the Redis key prefix; default the limiter store's, "tg".
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
	// RedisReadTimeout bounds the snapshot reads and best-effort write-backs
	// of the read path (Current, LoadSnapshot); default 100ms. Postgres is
	// the system of record, so with Redis slow or dead a read falls back to
	// it instead of waiting out go-redis's retries.
	RedisReadTimeout time.Duration
	// RedisTimeout bounds each attempt of a publish after a commit (a
	// snapshot, a new or revoked API key); default 250ms. The change is
	// committed in Postgres by then, so a Redis that does not answer costs
	// the request at most three attempts, never go-redis's seconds of
	// retries.
	RedisTimeout time.Duration
	// OnChange, when set, is told of every version bump inside its
	// transaction (cmd wires notify's outbox: entitlements.updated and
	// subscription.status commit with the change). An error rolls the
	// change back. Default nil.
	OnChange func(ctx context.Context, tx pgx.Tx, c Change) error
}

// Change is one version bump: the snapshot before it (zero Version when
// the tenant had none recorded) and after, and the bump's reason.
type Change struct {
	Before, After limiter.Snapshot
	Reason        string
}

// Service is the entitlements domain: plans, tenants, API keys, snapshots.
type Service struct {
	db    *pgxpool.Pool
	store *limitstore.Store
	log   *slog.Logger
	opts  Options
	keys  *keyCache
	index keyIndex
	// meters caches which meters any plan defines (MeterDefined).
	meters meterSet
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

// NewService builds the service. store may be nil in tools that never
// publish (then Publish is a no-op).
func NewService(db *pgxpool.Pool, store *limitstore.Store, log *slog.Logger, opts Options) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.DefaultPlan == "" {
		opts.DefaultPlan = "free"
	}
	if opts.GracePeriod == 0 {
		opts.GracePeriod = 7 * 24 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Prefix == "" && store != nil {
		opts.Prefix = store.Keys().Prefix
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
	if opts.RedisReadTimeout == 0 {
		opts.RedisReadTimeout = 100 * time.Millisecond
	}
	if opts.RedisTimeout <= 0 {
		opts.RedisTimeout = 250 * time.Millisecond
	}
	if opts.LastUsedEvery == 0 {
		opts.LastUsedEvery = time.Minute
	}
	return &Service{db: db, store: store, log: log, opts: opts, keys: newKeyCache(), unsent: map[string]time.Time{}, refreshQ: make(chan []byte, refreshQueue)}
}

// DefaultPlan is the plan tenants fall back to.
func (s *Service) DefaultPlan() string { return s.opts.DefaultPlan }

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

// Publish writes a snapshot to Redis (and announces it to every limiter).
func (s *Service) Publish(ctx context.Context, snap limiter.Snapshot) error {
	if s.store == nil {
		return nil
	}
	if err := s.store.PutSnapshot(ctx, snap); err != nil {
		return fmt.Errorf("entitlements: publish snapshot: %w", err)
	}
	return nil
}

// publishAll publishes snapshots after a commit, a few at a time so that a
// plan with many tenants still reaches all of them within a second; each
// is retried as publishRetried does.
func (s *Service) publishAll(ctx context.Context, snaps []limiter.Snapshot) {
	var g errgroup.Group
	g.SetLimit(16)
	for _, snap := range snaps {
		g.Go(func() error { s.publishRetried(ctx, snap); return nil })
	}
	_ = g.Wait()
}

// pgError turns constraint violations into errors a client can act on,
// naming the field, so that a race lost on a unique index is a 409, not a 500.
func pgError(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	field := fieldOfConstraint(pe.ConstraintName, pe.ColumnName)
	switch pe.Code {
	case "23505": // unique_violation
		return &apperr.Error{Code: apperr.Conflict, Message: field + " is already taken",
			Fields: []apperr.FieldError{{Field: field, Message: "already exists"}}}
	case "23503": // foreign_key_violation
		if strings.Contains(pe.ConstraintName, "plan") {
			field = "plan"
		}
		return apperr.Invalidf(field, "refers to something that does not exist")
	case "23514", "23502", "22001", "22003", "22P02", "22021": // check, not null, too long, out of range, bad text, bad encoding
		return apperr.Invalidf(field, "is not acceptable: %s", pe.Message)
	}
	return err
}

func fieldOfConstraint(constraint, column string) string {
	switch constraint {
	case "plans_pkey":
		return "key"
	case "plans_stripe_price_id_key":
		return "stripe_price_id"
	case "tenants_stripe_customer_id_key":
		return "stripe_customer_id"
	case "tenants_external_id_key", "tenants_external_id_check":
		return "external_id"
	case "tenants_plan_key_fkey":
		return "plan"
	case "plan_quotas_pkey":
		return "quotas"
	}
	// Postgres names check constraints <table>_<column>_check.
	for _, col := range []string{"stripe_price_id", "stripe_customer_id", "rate_per_second", "rate_burst", "concurrency", "quota_limit", "name", "key", "meter", "mode"} {
		if strings.Contains(constraint, "_"+col+"_") {
			switch col {
			case "rate_per_second":
				return "rate.per_second"
			case "rate_burst":
				return "rate.burst"
			case "quota_limit":
				return "quotas"
			}
			return col
		}
	}
	if column != "" {
		return column
	}
	return "body"
}

// keyCache maps SHA-256 hashes of API keys to what they authenticate.
type keyCache struct {
	mu    sync.Mutex
	live  bool
	epoch uint64 // bumped by every revocation and every loss of the subscription
	m     map[string]keyEntry
	// lastUsed remembers when this instance last wrote last_used_at per key.
	lastUsed map[string]time.Time
}

type keyEntry struct {
	info    KeyInfo
	ok      bool
	expires time.Time
	// refreshAt (a known key's) is when Authenticate asks Run to read the
	// key again ahead of expires; refreshing once it has asked.
	refreshAt  time.Time
	refreshing bool
}

// maxCachedKeys bounds the cache against floods of bogus keys.
const maxCachedKeys = 100_000

func newKeyCache() *keyCache {
	return &keyCache{m: map[string]keyEntry{}, lastUsed: map[string]time.Time{}}
}

func (c *keyCache) setLive(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live && !live {
		c.m = map[string]keyEntry{}
		c.epoch++
	}
	c.live = live
}

func (c *keyCache) isLive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// get returns the cached answer and the epoch a caller must present to put.
// refresh is true (once per entry) when a known key is past its refreshAt:
// the caller then asks for it to be read again.
func (c *keyCache) get(hash string, now time.Time) (e keyEntry, ok bool, epoch uint64, refresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live {
		return keyEntry{}, false, c.epoch, false
	}
	e, ok = c.m[hash]
	if ok && now.After(e.expires) {
		delete(c.m, hash)
		ok = false
	}
	if ok && e.ok && !e.refreshing && !e.refreshAt.IsZero() && now.After(e.refreshAt) {
		e.refreshing = true
		c.m[hash] = e
		refresh = true
	}
	return e, ok, c.epoch, refresh
}

// epochNow is the epoch a reader of Postgres must present to put.
func (c *keyCache) epochNow() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// put caches an answer read from Postgres unless a revocation (or a lost
// subscription) happened since the read began: then the answer may be stale.
func (c *keyCache) put(hash string, e keyEntry, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live || epoch != c.epoch {
		return
	}
	if len(c.m) >= maxCachedKeys {
		c.m = map[string]keyEntry{}
	}
	c.m[hash] = e
}

func (c *keyCache) revoke(hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, hash)
	c.epoch++
}

// touch reports whether last_used_at of key is due for a write, and marks it
// written.
func (c *keyCache) touch(keyID string, now time.Time, every time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.lastUsed[keyID]; ok && now.Sub(t) < every {
		return false
	}
	if len(c.lastUsed) >= maxCachedKeys {
		c.lastUsed = map[string]time.Time{}
	}
	c.lastUsed[keyID] = now
	return true
}
