package notify

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// ErrNotFound is an endpoint that does not exist.
var ErrNotFound = apperr.New(apperr.NotFound, "webhook endpoint not found")

// rotationOverlap is how long a rotated-out secret keeps signing beside the
// new one, so receivers can switch without losing a delivery.
const rotationOverlap = 24 * time.Hour

// Endpoint is a receiver of webhooks. Secret is set only in the answers of
// create and rotate-secret.
type Endpoint struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Description string   `json:"description"`
	Enabled     bool     `json:"enabled"`
	Secret      string   `json:"secret,omitempty"`
	// FailingSince is the first failed attempt since the last delivered
	// one; DisabledAt and DisabledReason say when and why the sender
	// disabled the endpoint (failing for 5 days straight).
	FailingSince   *time.Time `json:"failing_since"`
	DisabledAt     *time.Time `json:"disabled_at"`
	DisabledReason *string    `json:"disabled_reason"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

// EndpointInput is POST /admin/v1/webhook-endpoints.
type EndpointInput struct {
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Description string   `json:"description"`
}

// EndpointPatch is PATCH …/{id}: absent fields stay.
type EndpointPatch struct {
	URL     *string   `json:"url"`
	Events  *[]string `json:"events"`
	Enabled *bool     `json:"enabled"`
}

func newSecret() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("notify: secret: %w", err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b), nil
}

func validEvents(v *apperr.Validation, events []string) {
	for i, e := range events {
		if !slices.Contains(EventTypes, e) {
			v.Add(fmt.Sprintf("events[%d]", i), "unknown event type %q; one of %s", e, strings.Join(EventTypes, ", "))
		}
	}
}

// normEvents sorts and dedupes; never nil (the column is NOT NULL).
func normEvents(in []string) []string {
	out := slices.Compact(slices.Sorted(slices.Values(in)))
	if out == nil {
		out = []string{}
	}
	return out
}

// checkURL validates u's form (400) and, unless AllowPrivate, that its
// host resolves to public addresses only (422).
func (s *Service) checkURL(ctx context.Context, v *apperr.Validation, raw string) error {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		v.Add("url", "is required")
		return nil
	case err != nil || u.Host == "" || u.Hostname() == "":
		v.Add("url", "must be an absolute URL (https://host/path)")
		return nil
	case u.User != nil:
		v.Add("url", "must not carry credentials")
		return nil
	case u.Scheme == "https", u.Scheme == "http" && s.opts.AllowHTTP:
	default:
		if u.Scheme == "http" {
			v.Add("url", "must be https:// (WEBHOOK_ALLOW_HTTP=true accepts http://)")
		} else {
			v.Add("url", "must be https://")
		}
		return nil
	}
	if s.opts.AllowPrivate || v.Err() != nil {
		return nil
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ips, err := s.opts.Resolver.LookupNetIP(rctx, "ip", host)
		if err != nil {
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
				return &apperr.Error{Code: apperr.Unprocessable, Message: "webhook URL refused",
					Fields: []apperr.FieldError{{Field: "url", Message: fmt.Sprintf("host %q does not resolve", host)}}}
			}
			return apperr.New(apperr.Unavailable, "notify: resolving %q failed; try again", host)
		}
		addrs = ips
	}
	for _, a := range addrs {
		if why := privateAddr(a); why != "" {
			return &apperr.Error{Code: apperr.Unprocessable, Message: "webhook URL refused",
				Fields: []apperr.FieldError{{Field: "url", Message: fmt.Sprintf("host %q resolves to %s (%s); WEBHOOK_ALLOW_PRIVATE=true accepts it", host, a, why)}}}
		}
	}
	return nil
}

// Create adds an endpoint; its answer carries the secret, never shown again.
func (s *Service) Create(ctx context.Context, in EndpointInput) (Endpoint, error) {
	var v apperr.Validation
	in.URL = strings.TrimSpace(in.URL)
	if len(in.URL) > 2048 {
		v.Add("url", "at most 2048 characters")
	}
	if len(in.Description) > 500 {
		v.Add("description", "at most 500 characters")
	}
	validEvents(&v, in.Events)
	if err := s.checkURL(ctx, &v, in.URL); err != nil {
		return Endpoint{}, err
	}
	if err := v.Err(); err != nil {
		return Endpoint{}, err
	}
	secret, err := newSecret()
	if err != nil {
		return Endpoint{}, err
	}
	// The id is made here: it is the sealed secret's additional data.
	e := Endpoint{ID: newUUID(), URL: in.URL, Events: normEvents(in.Events), Description: in.Description, Enabled: true, Secret: secret}
	sealed, err := s.box.seal(e.ID, secret)
	if err != nil {
		return Endpoint{}, err
	}
	err = s.db.QueryRow(ctx, `INSERT INTO webhook_endpoints (id, url, events, description, secret) VALUES ($1, $2, $3, $4, $5)
RETURNING created_at, updated_at`, e.ID, e.URL, e.Events, e.Description, sealed).Scan(&e.CreatedAt, &e.UpdatedAt)
	if err != nil {
		return Endpoint{}, fmt.Errorf("notify: create endpoint: %w", err)
	}
	return e, nil
}

// newUUID is a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

const endpointCols = `id::text, url, events, description, enabled, failing_since, disabled_at, disabled_reason, created_at, updated_at`

func scanEndpoint(row pgx.Row) (Endpoint, error) {
	var e Endpoint
	err := row.Scan(&e.ID, &e.URL, &e.Events, &e.Description, &e.Enabled, &e.FailingSince, &e.DisabledAt, &e.DisabledReason, &e.CreatedAt, &e.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, ErrNotFound
	}
	return e, err
}

// List returns every endpoint, oldest first.
func (s *Service) List(ctx context.Context) ([]Endpoint, error) {
	rows, err := s.db.Query(ctx, `SELECT `+endpointCols+` FROM webhook_endpoints ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("notify: list endpoints: %w", err)
	}
	defer rows.Close()
	out := []Endpoint{}
	for rows.Next() {
		e, err := scanEndpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("notify: list endpoints: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("notify: list endpoints: %w", err)
	}
	return out, nil
}

// Get returns one endpoint.
func (s *Service) Get(ctx context.Context, id string) (Endpoint, error) {
	if !ids.IsUUID(id) {
		return Endpoint{}, ErrNotFound
	}
	e, err := scanEndpoint(s.db.QueryRow(ctx, `SELECT `+endpointCols+` FROM webhook_endpoints WHERE id = $1`, id))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Endpoint{}, fmt.Errorf("notify: get endpoint: %w", err)
	}
	return e, err
}

// Patch changes an endpoint's url, events or enabled.
func (s *Service) Patch(ctx context.Context, id string, p EndpointPatch) (Endpoint, error) {
	if !ids.IsUUID(id) {
		return Endpoint{}, ErrNotFound
	}
	var v apperr.Validation
	if p.URL != nil {
		u := strings.TrimSpace(*p.URL)
		p.URL = &u
		if err := s.checkURL(ctx, &v, u); err != nil {
			return Endpoint{}, err
		}
	}
	var events []string
	if p.Events != nil {
		validEvents(&v, *p.Events)
		events = normEvents(*p.Events)
	}
	if err := v.Err(); err != nil {
		return Endpoint{}, err
	}
	e, err := scanEndpoint(s.db.QueryRow(ctx, `UPDATE webhook_endpoints SET
    url = coalesce($2, url), events = coalesce($3, events), enabled = coalesce($4, enabled), updated_at = now(),
    -- enabled again by an admin: the failing streak starts over
    failing_since = CASE WHEN $4 THEN NULL ELSE failing_since END,
    disabled_at = CASE WHEN $4 THEN NULL ELSE disabled_at END,
    disabled_reason = CASE WHEN $4 THEN NULL ELSE disabled_reason END
WHERE id = $1 RETURNING `+endpointCols, id, p.URL, events, p.Enabled))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Endpoint{}, fmt.Errorf("notify: patch endpoint: %w", err)
	}
	return e, err
}

// Delete removes an endpoint and its deliveries.
func (s *Service) Delete(ctx context.Context, id string) error {
	if !ids.IsUUID(id) {
		return ErrNotFound
	}
	tag, err := s.db.Exec(ctx, `DELETE FROM webhook_endpoints WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("notify: delete endpoint: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// RotateSecret gives the endpoint a new secret; the current one keeps
// signing beside it for 24 hours (both signatures in webhook-signature).
func (s *Service) RotateSecret(ctx context.Context, id string) (Endpoint, error) {
	if !ids.IsUUID(id) {
		return Endpoint{}, ErrNotFound
	}
	secret, err := newSecret()
	if err != nil {
		return Endpoint{}, err
	}
	sealed, err := s.box.seal(strings.ToLower(id), secret)
	if err != nil {
		return Endpoint{}, err
	}
	e, err := scanEndpoint(s.db.QueryRow(ctx, `UPDATE webhook_endpoints SET prev_secret = secret, prev_until = $3, secret = $2, updated_at = now()
WHERE id = $1 RETURNING `+endpointCols, id, sealed, s.opts.Now().Add(rotationOverlap)))
	if errors.Is(err, ErrNotFound) {
		return Endpoint{}, ErrNotFound
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("notify: rotate secret: %w", err)
	}
	e.Secret = secret
	return e, nil
}

// SealStored seals the secrets of endpoints created before secrets were
// encrypted at rest (the worker calls it at start). Without a key it does
// nothing.
func (s *Service) SealStored(ctx context.Context) (int, error) {
	if s.box == nil {
		return 0, nil
	}
	rows, err := s.db.Query(ctx, `SELECT id::text, secret, prev_secret FROM webhook_endpoints
WHERE secret LIKE 'whsec\_%' OR prev_secret LIKE 'whsec\_%'`)
	if err != nil {
		return 0, fmt.Errorf("notify: seal stored secrets: %w", err)
	}
	type row struct {
		ID, Secret string
		Prev       *string
	}
	plain, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return 0, fmt.Errorf("notify: seal stored secrets: %w", err)
	}
	for _, r := range plain {
		sec, err := s.sealIfPlain(r.ID, r.Secret)
		if err != nil {
			return 0, err
		}
		var prev *string
		if r.Prev != nil {
			p, err := s.sealIfPlain(r.ID, *r.Prev)
			if err != nil {
				return 0, err
			}
			prev = &p
		}
		// Only the row as read is rewritten: a rotation meanwhile wins.
		if _, err := s.db.Exec(ctx, `UPDATE webhook_endpoints SET secret = $2, prev_secret = $3
WHERE id = $1 AND secret = $4 AND prev_secret IS NOT DISTINCT FROM $5`, r.ID, sec, prev, r.Secret, r.Prev); err != nil {
			return 0, fmt.Errorf("notify: seal stored secrets: %w", err)
		}
	}
	return len(plain), nil
}

func (s *Service) sealIfPlain(id, stored string) (string, error) {
	if !strings.HasPrefix(stored, "whsec_") {
		return stored, nil
	}
	return s.box.seal(id, stored)
}
