// Package readers registers, on an audit trail, how each kind of subject
// is read through the package that owns it. It is wiring, apart from audit
// so that audit knows none of its subjects' owners; cmd/api and the tests
// of the API and the console register the same readers through it.
package readers

import (
	"context"
	"encoding/json"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// Register tells trail how to read tenants (entitlements, with their API
// keys from credentials), plans (the catalogue, with how many tenants are
// on it from entitlements) and add-ons (the catalogue), API keys' tenants
// and service tokens (credentials), Stripe events (billing), grants and
// top-ups (credits). A nil owner's kinds are left unread: their entries
// then record no state (and a tenant's none of its keys, a plan's no
// tenant count).
func Register(trail *audit.Log, ents *entitlements.Service, cat *catalogue.Service, keys *credentials.Service, bill *billing.Service, creds *credits.Service) {
	if ents != nil {
		trail.Read(audit.KindTenant, audit.Reader{State: tenantState(ents, keys)})
	}
	if cat != nil {
		trail.Read(audit.KindPlan, audit.Reader{State: planState(cat, ents)})
		trail.Read(audit.KindAddon, audit.Reader{State: cat.AddonState})
	}
	if keys != nil {
		trail.Read(audit.KindKey, audit.Reader{TenantOf: keys.KeyTenant})
		trail.Read(audit.KindServiceToken, audit.Reader{State: keys.ServiceTokenState})
	}
	if bill != nil {
		trail.Read(audit.KindEvent, audit.Reader{State: bill.EventState, TenantOf: bill.EventTenant})
	}
	if creds != nil {
		trail.Read(audit.KindGrant, audit.Reader{State: creds.State, TenantOf: creds.TenantOf})
		trail.Read(audit.KindTopup, audit.Reader{State: creds.TopupState})
	}
}

// planState is the catalogue's state of a plan with how many tenants are
// on it (entitlements') under "tenants", as one object, as the trail
// recorded it before the catalogue had a package of its own.
func planState(cat *catalogue.Service, ents *entitlements.Service) func(context.Context, string) json.RawMessage {
	return func(ctx context.Context, key string) json.RawMessage {
		st := cat.PlanState(ctx, key)
		if st == nil || ents == nil {
			return st
		}
		n, err := ents.TenantsOnPlan(ctx, key)
		if err != nil {
			return st
		}
		return merge(st, "tenants", n)
	}
}

// merge is st with key set to v; st itself when it is not an object.
func merge(st json.RawMessage, key string, v any) json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(st, &m); err != nil {
		return st
	}
	b, err := json.Marshal(v)
	if err != nil {
		return st
	}
	m[key] = b
	out, err := json.Marshal(m)
	if err != nil {
		return st
	}
	return out
}

// tenantState is entitlements' state of a tenant with the tenant's API keys
// (credentials') under "api_keys", as one object: an admin comparing a key's
// revocation sees it in the tenant it belongs to.
func tenantState(ents *entitlements.Service, keys *credentials.Service) func(context.Context, string) json.RawMessage {
	return func(ctx context.Context, id string) json.RawMessage {
		st := ents.TenantState(ctx, id)
		if st == nil || keys == nil {
			return st
		}
		return merge(st, "api_keys", keys.KeysState(ctx, id))
	}
}
