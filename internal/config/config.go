// Package config reads Tollgate's configuration from the environment, the
// names fixed by the contract, and validates it once at start so that a bad
// value stops the process with one line naming the variable.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/mail"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config is the whole configuration of api and worker. Every field documents
// its variable and default.
type Config struct {
	// DatabaseURL (DATABASE_URL), default postgres://postgres@127.0.0.1:5432/tollgate?sslmode=disable.
	DatabaseURL string
	// DatabaseMaxConns (DATABASE_MAX_CONNS), default 10: the most Postgres
	// connections one process holds (its pool's size; it overrides the URL's
	// pool_max_conns).
	DatabaseMaxConns int32
	// DatabaseTimeout (DATABASE_TIMEOUT), default 5s: the longest an HTTP
	// request of the api waits on Postgres (the request's deadline; routes
	// that also call Stripe get Stripe's 10 s on top). Past it the answer is
	// 503 with Retry-After, so a hung Postgres never holds a client.
	DatabaseTimeout time.Duration
	// RedisURL (REDIS_URL), default redis://127.0.0.1:6379/0.
	RedisURL string
	// RedisClusterURL (REDIS_CLUSTER_URL), empty by default; when set it wins over RedisURL.
	RedisClusterURL string
	// RedisSentinelAddrs (REDIS_SENTINEL_ADDRS, "host:port,host:port"),
	// empty by default: the Sentinels that name the master, with
	// RedisSentinelMaster (REDIS_SENTINEL_MASTER). When set, clients follow
	// the master the Sentinels elect (go-redis's failover client) and
	// RedisURL only gives the master's user, password, database and TLS.
	// Not with REDIS_CLUSTER_URL.
	RedisSentinelAddrs  []string
	RedisSentinelMaster string
	// RedisSentinelUsername and RedisSentinelPassword
	// (REDIS_SENTINEL_USERNAME, REDIS_SENTINEL_PASSWORD), empty by default:
	// the Sentinels' own credentials (requirepass in sentinel.conf), which
	// may differ from the master's.
	RedisSentinelUsername string
	RedisSentinelPassword string
	// HTTPAddr (HTTP_ADDR), default 127.0.0.1:8080.
	HTTPAddr string
	// PublicURL (PUBLIC_URL): how people reach the api, for printed links;
	// default http://<HTTP_ADDR>.
	PublicURL string
	// AdminToken (ADMIN_TOKEN): required by api serve (one secret for the
	// whole deployment: every api process must accept the same token, so
	// none may make one up); see Dev for development.
	AdminToken string
	// Dev (TOLLGATE_DEV), default false: development mode. Without
	// ADMIN_TOKEN, api serve then uses the token make run generates in
	// DataDir/admin_token (creating the file once), shared by every
	// process started from the same checkout.
	Dev bool
	// DataDir (TOLLGATE_DATA), default .data: where make run keeps its
	// throwaway data and the generated admin token.
	DataDir string
	// AdminTokens (ADMIN_TOKENS, "alice:token,bob:token"): named admin
	// credentials, so that the audit trail says who acted. ADMIN_TOKEN
	// stays valid under the name "admin".
	AdminTokens map[string]string
	// StripeWebhookSecret (STRIPE_WEBHOOK_SECRET), whsec_…; empty = webhook answers 503.
	StripeWebhookSecret string
	// StripeWebhookSecretPrevious (STRIPE_WEBHOOK_SECRET_PREVIOUS): the old
	// secret, still accepted while a rotation is under way.
	StripeWebhookSecretPrevious string
	// StripeSecretKey (STRIPE_SECRET_KEY); when set, plan changes go through Stripe.
	StripeSecretKey string
	// StripeAPIBase (STRIPE_API_BASE) overrides Stripe's API URL (stripe-mock in tests).
	StripeAPIBase string
	// BillingContact (BILLING_CONTACT), empty by default: an email address
	// or an http(s) URL that the dashboard tells tenants to ask about plan
	// changes when they cannot change plan themselves (no STRIPE_SECRET_KEY).
	BillingContact string
	// DefaultPlan (DEFAULT_PLAN), default free: the plan of tenants whose subscription ended.
	DefaultPlan string
	// StripeProration (STRIPE_PRORATION), default create_prorations: how plan
	// changes through Stripe prorate (create_prorations, always_invoice, none,
	// or pending_if_incomplete: always_invoice and limits rise only once paid).
	StripeProration string
	// GracePeriod (GRACE_PERIOD, a Go duration), default 168h: how long past_due keeps the plan.
	GracePeriod time.Duration
	// LogLevel (LOG_LEVEL): debug, info, warn or error; default info.
	LogLevel slog.Level
	// MigrateOnStart (MIGRATE_ON_START), default true.
	MigrateOnStart bool
	// LimiterTimeout (LIMITER_TIMEOUT), default 50ms: how long a decision
	// waits for Redis's answer before asking whether Redis is alive (an
	// answering Redis is waited for; a silent one sends the decision to the
	// fail mode); see limiter.Options.Timeout.
	LimiterTimeout time.Duration
	// RedisTimeout (REDIS_TIMEOUT), default 250ms: the longest a request
	// waits for one Redis step outside the limiter's decisions (live usage
	// figures, adding ingested usage to counters, publishing a change or a
	// key revocation). Postgres holds the truth of each, so a Redis that
	// does not answer in time costs freshness, not the answer.
	RedisTimeout time.Duration
	// LeaseTTL (LEASE_TTL), default 60s: how long a concurrency slot taken
	// by POST /v1/check is held when DELETE /v1/leases/{id} never comes.
	LeaseTTL time.Duration
	// LimiterFailMode (LIMITER_FAIL_MODE): open, closed or local (default local).
	LimiterFailMode string
	// ExpectedInstances (EXPECTED_INSTANCES), default 1: the least number of
	// instances the local fail mode divides limits among (more when their
	// heartbeats say so).
	ExpectedInstances int
	// FlushInterval (FLUSH_INTERVAL), default 1s: how often the worker moves
	// limiter counters to Postgres; the most limiter usage a Redis loss can take.
	FlushInterval time.Duration
	// ShutdownTimeout (SHUTDOWN_TIMEOUT), default 15s: how long draining may take.
	ShutdownTimeout time.Duration
	// TrustedProxies (TRUSTED_PROXIES): CIDRs of the proxies whose
	// Forwarded / X-Forwarded-For name the client; empty = none (the TCP
	// peer is the client).
	TrustedProxies []netip.Prefix
	// MaxInFlight (MAX_IN_FLIGHT), default 0 (1000): the upper bound of the
	// adaptive limit on limiter decisions in progress in one api process;
	// over the limit, 503.
	MaxInFlight int
	// LimiterPrefetch (LIMITER_PREFETCH), default false: the api's limiter
	// decides rate and quota from units prefetched from Redis in chunks
	// (limiter.Options.Prefetch) instead of one Redis call per decision.
	// LIMITER_LOCAL_LEASES, its name until limiter/v0.1.0, is still read
	// when LIMITER_PREFETCH is unset (named in Deprecated).
	LimiterPrefetch bool
	// Deprecated names the deprecated variables that were set, each with
	// what replaces it, for the commands to log at startup.
	Deprecated []string
	// LimiterBatching (LIMITER_BATCHING), default false: the api's limiter
	// pipelines the decisions of concurrent requests (natural batching,
	// limiter.Options.Batching): a lone request goes at once, concurrent
	// ones share round trips. Off by default: side by side over HTTP it
	// measured within the machine's noise of one call per decision
	// (BENCHMARKS.md), while the library alone gains from it.
	LimiterBatching bool
	// MetricsAddr (METRICS_ADDR), default 127.0.0.1:9464: where api serves
	// /metrics on a listener of its own; "off" disables it. The public port's
	// /metrics is then 404, unless MetricsToken is set.
	MetricsAddr string
	// MetricsToken (METRICS_TOKEN), empty by default: when set, every
	// /metrics (the api's public port and METRICS_ADDR, the worker's
	// WORKER_METRICS_ADDR) answers only Authorization: Bearer <it>, and the
	// api's public port serves /metrics too.
	MetricsToken string
	// GRPCAddr (GRPC_ADDR), empty (off) by default: where the api answers
	// Envoy's rate limit service protocol (gRPC ShouldRateLimit and
	// grpc.health.v1); set, it listens.
	GRPCAddr string
	// GRPCRLSDomain (GRPC_RLS_DOMAIN), default tollgate: the rate limit
	// domain answered; calls for another domain are answered OK.
	GRPCRLSDomain string
	// WorkerMetricsAddr (WORKER_METRICS_ADDR), default 127.0.0.1:9091: where
	// the worker serves /metrics (its job counters live only in its process);
	// "off" disables it.
	WorkerMetricsAddr string
	// WorkerHeartbeatTimeout (WORKER_HEARTBEAT_TIMEOUT), default 10s, at
	// least 2s: a worker that has not marked itself alive for this long is
	// dead, and another worker makes the jobs it was running available again
	// (River alone waited about two minutes).
	WorkerHeartbeatTimeout time.Duration
	// Retention: how long the worker's hourly retention job keeps rows.
	// UsageEventsRetention (USAGE_EVENTS_RETENTION), default 2160h (90 days),
	// at least 864h: an event's row is its idempotency record, so it must
	// outlive the 35 days (plus 5 minutes of clock skew) in which the same
	// event would still be accepted; after that a replay is refused as too
	// old instead of counted twice. Its quantity stays in the period figures.
	UsageEventsRetention time.Duration
	// StripeEventsRetention (STRIPE_EVENTS_RETENTION), default 2160h, at
	// least 744h: Stripe may redeliver (or an operator resend) an event for
	// 30 days, and the row is what makes that a no-op. Only processed and
	// ignored events go; pending and failed ones stay.
	StripeEventsRetention time.Duration
	// EntitlementVersionsRetention (ENTITLEMENT_VERSIONS_RETENTION), default
	// 4320h (180 days): older versions go, but never a tenant's latest.
	EntitlementVersionsRetention time.Duration
	// ExpiredOverridesRetention (EXPIRED_OVERRIDES_RETENTION), default 720h
	// (30 days): how long an expired quota override stays listed after its
	// expiry took effect.
	ExpiredOverridesRetention time.Duration

	// Webhooks (docs/configuration.md#webhooks); the api and the worker
	// both read them. WebhookAllowHTTP (WEBHOOK_ALLOW_HTTP), default false:
	// accept http:// endpoint URLs. WebhookAllowPrivate
	// (WEBHOOK_ALLOW_PRIVATE), default false: accept and send to loopback,
	// private, link-local and metadata addresses.
	WebhookAllowHTTP, WebhookAllowPrivate bool
	// WebhookRetryBackoff (WEBHOOK_RETRY_BACKOFF), default
	// 5s,5m,30m,2h,5h,10h,10h,10h: the wait before each retry of a failed
	// delivery (1 to 20 positive durations); after the last it is failed.
	WebhookRetryBackoff []time.Duration
	// WebhookSecretKey (WEBHOOK_SECRET_KEY, 32 bytes in base64): seals the
	// endpoints' signing secrets at rest (AES-256-GCM). Empty: in
	// development (TOLLGATE_DEV) one is made in DataDir; otherwise the
	// endpoints' routes answer 503 and sealed secrets cannot sign.
	WebhookSecretKey []byte
}

// Error names the variable whose value is bad.
type Error struct {
	Var string
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("config: %s: %v", e.Var, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Load reads and validates the configuration. getenv is os.Getenv in main and
// a map in tests.
func Load(getenv func(string) string) (Config, error) {
	get := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	c := Config{
		DatabaseURL:                 get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tollgate?sslmode=disable"),
		RedisURL:                    get("REDIS_URL", "redis://127.0.0.1:6379/0"),
		RedisClusterURL:             get("REDIS_CLUSTER_URL", ""),
		RedisSentinelMaster:         get("REDIS_SENTINEL_MASTER", ""),
		RedisSentinelUsername:       get("REDIS_SENTINEL_USERNAME", ""),
		RedisSentinelPassword:       get("REDIS_SENTINEL_PASSWORD", ""),
		HTTPAddr:                    get("HTTP_ADDR", "127.0.0.1:8080"),
		AdminToken:                  get("ADMIN_TOKEN", ""),
		StripeWebhookSecret:         get("STRIPE_WEBHOOK_SECRET", ""),
		StripeWebhookSecretPrevious: get("STRIPE_WEBHOOK_SECRET_PREVIOUS", ""),
		StripeSecretKey:             get("STRIPE_SECRET_KEY", ""),
		StripeAPIBase:               get("STRIPE_API_BASE", ""),
		BillingContact:              get("BILLING_CONTACT", ""),
		StripeProration:             get("STRIPE_PRORATION", "create_prorations"),
		DefaultPlan:                 get("DEFAULT_PLAN", "free"),
		LimiterFailMode:             get("LIMITER_FAIL_MODE", "local"),
	}
	var errs []error
	bad := func(name string, err error) { errs = append(errs, &Error{Var: name, Err: err}) }

	if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		bad("DATABASE_URL", errors.New("want postgres://user@host:port/dbname"))
	} else if strings.Trim(u.Path, "/") == "" {
		bad("DATABASE_URL", errors.New("names no database"))
	}
	if c.RedisClusterURL != "" {
		if _, err := redis.ParseClusterURL(c.RedisClusterURL); err != nil {
			bad("REDIS_CLUSTER_URL", err)
		}
	} else if _, err := redis.ParseURL(c.RedisURL); err != nil {
		bad("REDIS_URL", err)
	}
	if v := get("REDIS_SENTINEL_ADDRS", ""); v != "" {
		for _, a := range strings.Split(v, ",") {
			a = strings.TrimSpace(a)
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				bad("REDIS_SENTINEL_ADDRS", fmt.Errorf("%q: want host:port,host:port", a))
				break
			}
			c.RedisSentinelAddrs = append(c.RedisSentinelAddrs, a)
		}
		switch {
		case c.RedisSentinelMaster == "":
			bad("REDIS_SENTINEL_MASTER", errors.New("the master's name (sentinel monitor <name> …) is needed with REDIS_SENTINEL_ADDRS"))
		case c.RedisClusterURL != "":
			bad("REDIS_SENTINEL_ADDRS", errors.New("not with REDIS_CLUSTER_URL: a Cluster fails over by itself, without Sentinels"))
		}
	} else if c.RedisSentinelMaster != "" {
		bad("REDIS_SENTINEL_ADDRS", errors.New("the Sentinels' host:port list is needed with REDIS_SENTINEL_MASTER"))
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		bad("HTTP_ADDR", errors.New("want host:port"))
	}
	if v := get("ADMIN_TOKENS", ""); v != "" {
		toks, err := ParseAdminTokens(v)
		if err != nil {
			bad("ADMIN_TOKENS", err)
		}
		c.AdminTokens = toks
	}
	c.PublicURL = strings.TrimRight(get("PUBLIC_URL", "http://"+c.HTTPAddr), "/")
	if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("PUBLIC_URL", errors.New("want an http(s) URL"))
	}
	for name, v := range map[string]string{"STRIPE_WEBHOOK_SECRET": c.StripeWebhookSecret, "STRIPE_WEBHOOK_SECRET_PREVIOUS": c.StripeWebhookSecretPrevious} {
		if v != "" && !strings.HasPrefix(v, "whsec_") {
			bad(name, errors.New("want a whsec_… signing secret"))
		}
	}
	if c.StripeSecretKey != "" && !(strings.HasPrefix(c.StripeSecretKey, "sk_") || strings.HasPrefix(c.StripeSecretKey, "rk_")) {
		bad("STRIPE_SECRET_KEY", errors.New("want an sk_… or rk_… key"))
	}
	switch c.StripeProration {
	case "create_prorations", "always_invoice", "none", "pending_if_incomplete":
	default:
		bad("STRIPE_PRORATION", errors.New("want create_prorations, always_invoice, none or pending_if_incomplete"))
	}
	if c.StripeAPIBase != "" {
		if u, err := url.Parse(c.StripeAPIBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("STRIPE_API_BASE", errors.New("want an http(s) URL"))
		}
	}
	if c.BillingContact != "" && !ValidContact(c.BillingContact) {
		bad("BILLING_CONTACT", errors.New("want an email address (billing@example.com) or an http(s) URL"))
	}
	if !planKey(c.DefaultPlan) {
		bad("DEFAULT_PLAN", errors.New("want a plan key [a-z0-9_-]{1,64}"))
	}
	if err := c.LogLevel.UnmarshalText([]byte(get("LOG_LEVEL", "info"))); err != nil {
		bad("LOG_LEVEL", errors.New("want debug, info, warn or error"))
	}
	var err error
	if c.Dev, err = strconv.ParseBool(get("TOLLGATE_DEV", "false")); err != nil {
		bad("TOLLGATE_DEV", errors.New("want true or false"))
	}
	c.DataDir = get("TOLLGATE_DATA", ".data")
	if c.MigrateOnStart, err = strconv.ParseBool(get("MIGRATE_ON_START", "true")); err != nil {
		bad("MIGRATE_ON_START", errors.New("want true or false"))
	}
	dur := func(name, def string, min time.Duration) time.Duration {
		d, err := time.ParseDuration(get(name, def))
		if err != nil || d < min {
			bad(name, fmt.Errorf("want a duration of at least %s, like %s", min, def))
		}
		return d
	}
	c.GracePeriod = dur("GRACE_PERIOD", "168h", 0)
	c.DatabaseTimeout = dur("DATABASE_TIMEOUT", "5s", 100*time.Millisecond)
	if n, err := strconv.ParseInt(get("DATABASE_MAX_CONNS", "10"), 10, 32); err != nil || n < 2 {
		bad("DATABASE_MAX_CONNS", errors.New("want a whole number of at least 2"))
	} else {
		c.DatabaseMaxConns = int32(n)
	}
	c.LimiterTimeout = dur("LIMITER_TIMEOUT", "50ms", time.Millisecond)
	c.LeaseTTL = dur("LEASE_TTL", "60s", time.Second)
	c.RedisTimeout = dur("REDIS_TIMEOUT", "250ms", time.Millisecond)
	c.FlushInterval = dur("FLUSH_INTERVAL", "1s", 100*time.Millisecond)
	c.ShutdownTimeout = dur("SHUTDOWN_TIMEOUT", "15s", 0)
	c.UsageEventsRetention = dur("USAGE_EVENTS_RETENTION", "2160h", 864*time.Hour)
	c.StripeEventsRetention = dur("STRIPE_EVENTS_RETENTION", "2160h", 744*time.Hour)
	c.EntitlementVersionsRetention = dur("ENTITLEMENT_VERSIONS_RETENTION", "4320h", time.Hour)
	c.ExpiredOverridesRetention = dur("EXPIRED_OVERRIDES_RETENTION", "720h", 0)
	c.WorkerHeartbeatTimeout = dur("WORKER_HEARTBEAT_TIMEOUT", "10s", 2*time.Second)
	c.MetricsAddr = get("METRICS_ADDR", "127.0.0.1:9464")
	if c.MetricsAddr == "off" {
		c.MetricsAddr = ""
	} else if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
		bad("METRICS_ADDR", errors.New("want host:port, or off"))
	}
	if c.MetricsToken = get("METRICS_TOKEN", ""); c.MetricsToken != "" && len(c.MetricsToken) < 16 {
		bad("METRICS_TOKEN", errors.New("want at least 16 characters"))
	}
	c.GRPCAddr = get("GRPC_ADDR", "")
	if c.GRPCAddr == "off" {
		c.GRPCAddr = ""
	} else if c.GRPCAddr != "" {
		if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
			bad("GRPC_ADDR", errors.New("want host:port, or empty for off"))
		}
	}
	c.GRPCRLSDomain = get("GRPC_RLS_DOMAIN", "tollgate")
	c.WorkerMetricsAddr = get("WORKER_METRICS_ADDR", "127.0.0.1:9091")
	if c.WorkerMetricsAddr == "off" {
		c.WorkerMetricsAddr = ""
	} else if _, _, err := net.SplitHostPort(c.WorkerMetricsAddr); err != nil {
		bad("WORKER_METRICS_ADDR", errors.New("want host:port, or off"))
	}
	switch c.LimiterFailMode {
	case "open", "closed", "local":
	default:
		bad("LIMITER_FAIL_MODE", errors.New("want open, closed or local"))
	}
	if c.ExpectedInstances, err = strconv.Atoi(get("EXPECTED_INSTANCES", "1")); err != nil || c.ExpectedInstances < 1 {
		bad("EXPECTED_INSTANCES", errors.New("want a whole number of at least 1"))
	}
	if tp := get("TRUSTED_PROXIES", ""); tp != "" {
		for _, f := range strings.FieldsFunc(tp, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
			if p, err := netip.ParsePrefix(f); err == nil {
				c.TrustedProxies = append(c.TrustedProxies, p.Masked())
			} else if a, err := netip.ParseAddr(f); err == nil {
				c.TrustedProxies = append(c.TrustedProxies, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			} else {
				bad("TRUSTED_PROXIES", fmt.Errorf("%q: want CIDRs such as 10.0.0.0/8, comma-separated", f))
				break
			}
		}
	}
	if c.MaxInFlight, err = strconv.Atoi(get("MAX_IN_FLIGHT", "0")); err != nil || c.MaxInFlight < 0 {
		bad("MAX_IN_FLIGHT", errors.New("want a whole number, 0 for no cap"))
	}
	if c.WebhookAllowHTTP, err = strconv.ParseBool(get("WEBHOOK_ALLOW_HTTP", "false")); err != nil {
		bad("WEBHOOK_ALLOW_HTTP", errors.New("want true or false"))
	}
	if c.WebhookAllowPrivate, err = strconv.ParseBool(get("WEBHOOK_ALLOW_PRIVATE", "false")); err != nil {
		bad("WEBHOOK_ALLOW_PRIVATE", errors.New("want true or false"))
	}
	if c.WebhookRetryBackoff, err = parseBackoff(get("WEBHOOK_RETRY_BACKOFF", "5s,5m,30m,2h,5h,10h,10h,10h")); err != nil {
		bad("WEBHOOK_RETRY_BACKOFF", err)
	}
	if c.WebhookSecretKey, err = parseWebhookKey(get("WEBHOOK_SECRET_KEY", "")); err != nil {
		bad("WEBHOOK_SECRET_KEY", err)
	}
	prefetchVar := "LIMITER_PREFETCH"
	if get("LIMITER_PREFETCH", "") == "" && get("LIMITER_LOCAL_LEASES", "") != "" {
		prefetchVar = "LIMITER_LOCAL_LEASES"
		c.Deprecated = append(c.Deprecated, "LIMITER_LOCAL_LEASES: use LIMITER_PREFETCH (the old name is read until the next release)")
	}
	if c.LimiterPrefetch, err = strconv.ParseBool(get(prefetchVar, "false")); err != nil {
		bad(prefetchVar, errors.New("want true or false"))
	}
	if c.LimiterBatching, err = strconv.ParseBool(get("LIMITER_BATCHING", "false")); err != nil {
		bad("LIMITER_BATCHING", errors.New("want true or false"))
	}
	if len(errs) > 0 {
		return Config{}, errs[0] // one line, naming the first bad variable
	}
	return c, nil
}

// ValidContact reports whether s is an email address or an http(s) URL
// (BILLING_CONTACT), the two things a page can link to.
func ValidContact(s string) bool {
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return false
	}
	if u, err := url.Parse(s); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return true
	}
	a, err := mail.ParseAddress(s)
	return err == nil && a.Address == s
}

func planKey(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// NewRedis builds the go-redis client the configuration names: a cluster
// client when REDIS_CLUSTER_URL is set, a failover client following the
// Sentinels' master with REDIS_SENTINEL_ADDRS, else a single-node client.
func (c Config) NewRedis() (redis.UniversalClient, error) {
	if c.RedisClusterURL != "" {
		opt, err := redis.ParseClusterURL(c.RedisClusterURL)
		if err != nil {
			return nil, &Error{Var: "REDIS_CLUSTER_URL", Err: err}
		}
		// Deadlines of callers' contexts bound socket I/O too, so a slow
		// or dead Redis never holds a request past its deadline.
		opt.ContextTimeoutEnabled = true
		// A master that dies answers no MOVED: go-redis learns of its
		// replica's promotion only when it reloads the slots, by default
		// every 60 s, and every decision of that shard fails until then.
		// Reloading every 2 s (one CLUSTER SLOTS, and only while the client
		// is used) puts decisions back within seconds of the failover.
		if opt.ClusterStateReloadInterval == 0 {
			opt.ClusterStateReloadInterval = 2 * time.Second
		}
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return nil, &Error{Var: "REDIS_URL", Err: err}
	}
	opt.ContextTimeoutEnabled = true
	if len(c.RedisSentinelAddrs) > 0 {
		// The master is whichever the Sentinels name: on a failover the
		// client drops its connections and dials the new one.
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            c.RedisSentinelMaster,
			SentinelAddrs:         c.RedisSentinelAddrs,
			SentinelUsername:      c.RedisSentinelUsername,
			SentinelPassword:      c.RedisSentinelPassword,
			Username:              opt.Username,
			Password:              opt.Password,
			DB:                    opt.DB,
			TLSConfig:             opt.TLSConfig,
			ContextTimeoutEnabled: true,
		}), nil
	}
	return redis.NewClient(opt), nil
}

var adminNameRe = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)

// ParseAdminTokens reads "name:token,name:token". Names are 1-64 of
// letters, digits and _.@-, unique, and not "admin" (ADMIN_TOKEN's);
// tokens are at least 16 characters and unique.
func ParseAdminTokens(v string) (map[string]string, error) {
	out := map[string]string{}
	seen := map[string]bool{}
	for i, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, tok, ok := strings.Cut(item, ":")
		name, tok = strings.TrimSpace(name), strings.TrimSpace(tok)
		switch {
		case !ok:
			// Never echo the item: it may be a bare token.
			return nil, fmt.Errorf("item %d: want name:token pairs separated by commas", i+1)
		case !adminNameRe.MatchString(name):
			return nil, fmt.Errorf("name %q: want 1-64 letters, digits, _ . @ -", name)
		case name == "admin":
			return nil, errors.New(`the name "admin" belongs to ADMIN_TOKEN`)
		case out[name] != "":
			return nil, fmt.Errorf("name %q appears twice", name)
		case len(tok) < 16:
			return nil, fmt.Errorf("token of %q: want at least 16 characters", name)
		case seen[tok]:
			return nil, fmt.Errorf("token of %q is another name's token too", name)
		}
		out[name], seen[tok] = tok, true
	}
	return out, nil
}

// parseBackoff reads WEBHOOK_RETRY_BACKOFF: 1 to 20 positive durations
// separated by commas.
func parseBackoff(v string) ([]time.Duration, error) {
	parts := strings.Split(v, ",")
	if len(parts) > 20 {
		return nil, fmt.Errorf("%d retries, want at most 20", len(parts))
	}
	out := make([]time.Duration, 0, len(parts))
	for _, p := range parts {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q is not a positive duration; want e.g. 5s,5m,30m", strings.TrimSpace(p))
		}
		out = append(out, d)
	}
	return out, nil
}
