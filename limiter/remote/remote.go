// Package remote loads what a limiter needs from Tollgate's API when Redis
// does not have it: a backend outside Tollgate passes Client.Snapshot and
// Client.Usage as limiter.Options.Loader and UsageLoader.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Options configure New. The zero value is usable.
type Options struct {
	// HTTPClient makes the calls; default a client of its own (no overall
	// timeout: every attempt is bounded by Timeout).
	HTTPClient *http.Client
	// Timeout bounds one attempt (connect, request, whole response);
	// default 2s.
	Timeout time.Duration
	// Attempts is how many times a call is tried when Tollgate does not
	// answer, answers 5xx or 429; default 3. 4xx answers are not retried.
	Attempts int
	// Backoff is the wait before the second attempt, doubled before each
	// further one (never past a Retry-After Tollgate sends, at most 5s);
	// default 100ms.
	Backoff time.Duration
	// Cooldown is how long after a call that failed every attempt further
	// calls fail at once, without asking Tollgate, so that decisions are not
	// held up by an API that is down; default 1s.
	Cooldown time.Duration
}

// Client loads what the limiter needs from Tollgate's API when Redis does
// not have it: the tenant's entitlement snapshot (GET
// /service/v1/tenants/{id}/snapshot), the durable usage a lost quota
// counter is rebuilt from (GET /service/v1/tenants/{id}/usage) and the
// credit grants lost grants are rebuilt from (GET
// /service/v1/tenants/{id}/grants). It is how a backend outside Tollgate
// keeps Tollgate's Redis-loss guarantees: a flushed or failed-over Redis
// neither makes a live tenant unknown, nor restarts its quotas at zero, nor
// gives its grants again or loses them.
//
// Tollgate writes a loaded snapshot back to Redis, so other processes find
// it there. The calls are authorized by a service token (POST
// /admin/v1/service-tokens; it can read snapshots and usage and nothing
// else) or ADMIN_TOKEN.
//
// When Tollgate does not answer after the bounded retries, the error is
// not limiter.ErrUnknownTenant: a decision that needed a snapshot fails with that
// error (the middleware answers 500 unless WithErrorHandler says
// otherwise), and a decision that needed a counter rebuilt follows the
// quota's fail mode. A tenant Tollgate does not know is limiter.ErrUnknownTenant.
type Client struct {
	base    *url.URL
	token   string
	client  *http.Client
	timeout time.Duration
	tries   int
	backoff time.Duration
	cool    time.Duration

	downUntil atomic.Int64 // unix ns; calls fail fast before it
}

// New returns loaders reading from the Tollgate API at baseURL (e.g.
// "https://tollgate.internal:8080") with token. Use its methods as
// Options.Loader and Options.UsageLoader:
//
//	tg, err := remote.New(os.Getenv("TOLLGATE_URL"), os.Getenv("TOLLGATE_TOKEN"), remote.Options{})
//	l, err := limiter.New(rdb, limiter.Options{Loader: tg.Snapshot, UsageLoader: tg.Usage})
func New(baseURL, token string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("remote: URL %q: want http(s)://host[:port]", baseURL)
	}
	if token == "" {
		return nil, errors.New("remote: token is empty: create a service token with POST /admin/v1/service-tokens")
	}
	r := &Client{base: u, token: token, client: opts.HTTPClient, timeout: opts.Timeout, tries: opts.Attempts, backoff: opts.Backoff, cool: opts.Cooldown}
	if r.client == nil {
		r.client = &http.Client{}
	}
	if r.timeout == 0 {
		r.timeout = 2 * time.Second
	}
	if r.tries == 0 {
		r.tries = 3
	}
	if r.backoff == 0 {
		r.backoff = 100 * time.Millisecond
	}
	if r.cool == 0 {
		r.cool = time.Second
	}
	switch {
	case r.timeout < 0:
		return nil, fmt.Errorf("remote: Options.Timeout %v is negative", r.timeout)
	case r.tries < 0:
		return nil, fmt.Errorf("remote: Options.Attempts %d is negative", r.tries)
	case r.backoff < 0:
		return nil, fmt.Errorf("remote: Options.Backoff %v is negative", r.backoff)
	case r.cool < 0:
		return nil, fmt.Errorf("remote: Options.Cooldown %v is negative", r.cool)
	}
	return r, nil
}

// Snapshot is a limiter.SnapshotLoader: the tenant's snapshot from Tollgate.
// limiter.ErrUnknownTenant (wrapped) when Tollgate does not know the tenant.
func (r *Client) Snapshot(ctx context.Context, tenant string) (limiter.Snapshot, error) {
	var snap limiter.Snapshot
	if err := r.get(ctx, "tenants/"+url.PathEscape(tenant)+"/snapshot", nil, &snap); err != nil {
		return limiter.Snapshot{}, err
	}
	snap.TenantID = tenant
	return snap, nil
}

// Usage is a limiter.UsageLoader: the durable usage of a meter in the period
// starting at periodStart, from Tollgate.
func (r *Client) Usage(ctx context.Context, tenant, meter string, periodStart time.Time) (int64, error) {
	q := url.Values{"meter": {meter}, "period_start": {periodStart.UTC().Format(time.RFC3339)}}
	var body struct {
		Used *int64 `json:"used"`
	}
	if err := r.get(ctx, "tenants/"+url.PathEscape(tenant)+"/usage", q, &body); err != nil {
		return 0, err
	}
	if body.Used == nil {
		return 0, errors.New("remote: usage: reply without \"used\"")
	}
	return *body.Used, nil
}

// Grants is a limiter GrantLoader (Options.GrantLoader): the tenant's
// credit grants the limiter draws, in draw order, with what Tollgate's
// ledger says remains, from which the limiter rebuilds grants Redis lost
// before it decides (so a Redis that lost them gives no free units and
// takes none away).
func (r *Client) Grants(ctx context.Context, tenant string) ([]keyspace.Grant, error) {
	var body struct {
		Grants *[]struct {
			ID          string     `json:"id"`
			Meter       string     `json:"meter"`
			EffectiveAt time.Time  `json:"effective_at"`
			ExpiresAt   *time.Time `json:"expires_at"`
			Remaining   int64      `json:"remaining"`
		} `json:"grants"`
	}
	if err := r.get(ctx, "tenants/"+url.PathEscape(tenant)+"/grants", nil, &body); err != nil {
		return nil, err
	}
	if body.Grants == nil {
		return nil, errors.New("remote: grants: reply without \"grants\"")
	}
	out := make([]keyspace.Grant, 0, len(*body.Grants))
	for _, g := range *body.Grants {
		if g.ID == "" || g.Meter == "" || g.Remaining < 0 {
			return nil, fmt.Errorf("remote: grants: a grant without id or meter, or with a negative remaining (%q)", g.ID)
		}
		kg := keyspace.Grant{ID: g.ID, Meter: g.Meter, EffectiveAt: g.EffectiveAt, Remaining: g.Remaining}
		if g.ExpiresAt != nil {
			kg.ExpiresAt = *g.ExpiresAt
		}
		out = append(out, kg)
	}
	return out, nil
}

// remoteError is a failed call: status 0 when Tollgate did not answer.
type remoteError struct {
	status int
	detail string
	retry  time.Duration
}

func (e *remoteError) Error() string {
	if e.status == 0 {
		return "remote: tollgate did not answer: " + e.detail
	}
	return fmt.Sprintf("remote: tollgate answered %d: %s", e.status, e.detail)
}

func (e *remoteError) temporary() bool {
	return e.status == 0 || e.status == http.StatusTooManyRequests || e.status >= 500
}

func (r *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	u := r.base.JoinPath("service", "v1")
	u = u.JoinPath(strings.Split(path, "/")...)
	u.RawQuery = q.Encode()
	if until := r.downUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		return &remoteError{detail: "not asked: it failed less than Options.Cooldown ago"}
	}
	wait := r.backoff
	var last error
	for attempt := 1; ; attempt++ {
		err := r.once(ctx, u.String(), out)
		if err == nil {
			return nil
		}
		last = err
		var re *remoteError
		if !errors.As(err, &re) || !re.temporary() {
			break
		}
		if attempt >= r.tries {
			r.downUntil.Store(time.Now().Add(r.cool).UnixNano())
			break
		}
		d := wait
		if re.retry > d {
			d = re.retry
		}
		d = min(d, 5*time.Second)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (after %d attempts: %w)", ctx.Err(), attempt, last)
		case <-t.C:
		}
		wait *= 2
	}
	return last
}

func (r *Client) once(ctx context.Context, u string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("remote: request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Accept", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
			return ctx.Err() // the caller gave up: not Tollgate's fault
		}
		return &remoteError{detail: err.Error()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &remoteError{detail: "reading the reply: " + err.Error()}
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("remote: reply: %w", err)
		}
		return nil
	}
	var p struct {
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(body, &p)
	if p.Detail == "" {
		p.Detail = http.StatusText(resp.StatusCode)
	}
	re := &remoteError{status: resp.StatusCode, detail: p.Detail}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		re.retry = time.Duration(s) * time.Second
	}
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %w", limiter.ErrUnknownTenant, re)
	}
	return re
}

// The methods are the limiter's loaders.
var (
	_ limiter.SnapshotLoader = (*Client)(nil).Snapshot
	_ limiter.UsageLoader    = (*Client)(nil).Usage
)
