package entitlements

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// External ids (issue 23 point 8) are the backend's own id for a tenant, so
// that it can address the tenant without keeping Tollgate's UUID. The
// charset is what is safe unescaped in a URL path segment, a Redis key and
// a hash tag (no '{', '}', '/', '%' or space); migration 00065 checks the
// same pattern. Case-sensitive: "Acme" and "acme" are two tenants.
const externalIDRule = "must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':', '@' or '-'"

// ValidExternalID reports whether s is acceptable as an external id.
func ValidExternalID(s string) bool { return keyspace.ValidExternalID(s) }

// TenantPatch is the body of a tenant edit (PATCH /admin/v1/tenants/{id}):
// absent fields stay as they are.
type TenantPatch struct {
	Name *string `json:"name"`
	// ExternalID: a string sets it, null removes it.
	ExternalID OptionalString `json:"external_id"`
}

// OptionalString is a JSON field that tells absent, null and a string
// apart.
type OptionalString struct {
	Set   bool    // the field was present
	Value *string // nil = null
}

// UnmarshalJSON takes null or a string; anything else names external_id
// (the only field of this type).
func (o *OptionalString) UnmarshalJSON(b []byte) error {
	o.Set = true
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		o.Value = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return apperr.Invalidf("external_id", "must be a string or null")
	}
	o.Value = &s
	return nil
}

// Validate checks every field present, naming the bad ones.
func (p *TenantPatch) Validate() error {
	var v apperr.Validation
	if p.Name != nil {
		name := strings.TrimSpace(*p.Name)
		switch {
		case name == "":
			v.Add("name", "must not be blank")
		case len([]rune(name)) > maxNameLen:
			v.Add("name", "must be at most %d characters", maxNameLen)
		case !apperr.CleanText(name):
			v.Add("name", "must be UTF-8 text without control characters")
		}
	}
	if p.ExternalID.Set && p.ExternalID.Value != nil && !ValidExternalID(*p.ExternalID.Value) {
		v.Add("external_id", externalIDRule)
	}
	return v.Err()
}

// UpdateTenant edits a tenant's name and external id. Neither is an
// entitlement, so no version is recorded; a changed external id moves its
// alias in Redis and announces the tenant, so that every limiter drops
// what it resolved within the invalidation's delay.
func (s *Service) UpdateTenant(ctx context.Context, id string, p TenantPatch) (Tenant, error) {
	if err := p.Validate(); err != nil {
		return Tenant{}, err
	}
	var before, t Tenant
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		if before, err = getTenant(ctx, tx, id, true); err != nil {
			return err
		}
		name, ext := before.Name, before.ExternalID
		if p.Name != nil {
			name = strings.TrimSpace(*p.Name)
		}
		if p.ExternalID.Set {
			ext = p.ExternalID.Value
		}
		if name == before.Name && deref(ext) == deref(before.ExternalID) {
			t = before
			return nil
		}
		rows, err := tx.Query(ctx, `UPDATE tenants AS t SET name = $2, external_id = $3, updated_at = now()
			WHERE t.id = $1 RETURNING `+tenantCols, id, name, ext)
		if err != nil {
			return pgError(err)
		}
		t, err = pgx.CollectExactlyOneRow(rows, scanTenant)
		return pgError(err)
	})
	if err != nil {
		return Tenant{}, fmt.Errorf("entitlements: update tenant: %w", err)
	}
	if old, new := deref(before.ExternalID), deref(t.ExternalID); old != new {
		s.log.InfoContext(ctx, "tenant external id changed", "tenant_id", t.ID)
		s.publishAlias(ctx, t.ID, old, new, t.EntitlementVersion)
	}
	return t, nil
}

// publishAlias moves the tenant's alias in Redis after a commit, with the
// retries of every publish; what still fails is logged (the republishing
// pass writes the alias again, and a missing alias is loaded from here).
func (s *Service) publishAlias(ctx context.Context, tenantID, old, new string, version int64) {
	if s.store == nil || old == new {
		return
	}
	err := limitstore.Retry(ctx, s.opts.RedisTimeout, func(ctx context.Context) error { return s.store.MoveAlias(ctx, tenantID, old, new, version) })
	if err != nil {
		s.log.WarnContext(ctx, "tenant external id alias not published", "tenant_id", tenantID, "err", err)
	}
}

// TenantByExternalID finds the tenant with that external id; NotFound
// when none has it (or it is not a valid external id).
func (s *Service) TenantByExternalID(ctx context.Context, externalID string) (Tenant, error) {
	if !ValidExternalID(externalID) {
		return Tenant{}, apperr.New(apperr.NotFound, "no tenant with external id %q", externalID)
	}
	rows, err := s.db.Query(ctx, `SELECT `+tenantCols+` FROM tenants t WHERE t.external_id = $1`, externalID)
	if err != nil {
		return Tenant{}, fmt.Errorf("entitlements: tenant by external id: %w", err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, apperr.New(apperr.NotFound, "no tenant with external id %q", externalID)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("entitlements: tenant by external id: %w", err)
	}
	return t, nil
}

// LoadExternal is the limiter's loader of an alias missing from Redis
// (limiter.Options.ExternalLoader): the tenant id of an external id, from
// Postgres, written back to Redis. An unknown one is
// limiter.ErrUnknownTenant, as an unknown tenant id is.
func (s *Service) LoadExternal(ctx context.Context, externalID string) (string, error) {
	t, err := s.TenantByExternalID(ctx, externalID)
	if apperr.CodeOf(err) == apperr.NotFound {
		return "", fmt.Errorf("%w: %w", limiter.ErrUnknownTenant, err)
	}
	if err != nil {
		return "", err
	}
	if s.store != nil {
		wctx, cancel := context.WithTimeout(ctx, s.opts.RedisReadTimeout)
		defer cancel()
		if err := s.store.RefreshAlias(wctx, externalID, t.ID); err != nil {
			s.log.WarnContext(ctx, "writing loaded alias back failed", "tenant_id", t.ID, "err", err)
		}
	}
	return t.ID, nil
}

// TenantByRef is the tenant a reference names that a backend wrote
// (Checkout's client_reference_id or metadata.tenant_id): a tenant id
// first, then an external id; "" when it names none.
func (w *Writes) TenantByRef(ctx context.Context, ref string) (string, error) {
	if ref == "" {
		return "", nil
	}
	var id string
	var err error
	if ids.IsUUID(ref) {
		err = w.tx.QueryRow(ctx, `SELECT id::text FROM tenants WHERE id = $1`, ref).Scan(&id)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("entitlements: tenant by ref: %w", err)
		}
	}
	if !ValidExternalID(ref) {
		return "", nil
	}
	err = w.tx.QueryRow(ctx, `SELECT id::text FROM tenants WHERE external_id = $1`, ref).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("entitlements: tenant by ref: %w", err)
	}
	return id, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
