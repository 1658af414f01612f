// Package readers registers, on an audit trail, how each kind of subject
// is read through the package that owns it. It is wiring, apart from audit
// so that audit knows none of its subjects' owners; cmd/api and the tests
// of the API and the console register the same readers through it.
package readers

import (
	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// Register tells trail how to read Stripe events (billing), plans and
// add-ons (entitlements), grants and top-ups (credits). A nil owner's kinds
// are left unread: their entries then record no state.
func Register(trail *audit.Log, ents *entitlements.Service, bill *billing.Service, creds *credits.Service) {
	if bill != nil {
		trail.Read(audit.KindEvent, audit.Reader{State: bill.EventState, TenantOf: bill.EventTenant})
	}
	if ents != nil {
		trail.Read(audit.KindPlan, audit.Reader{State: ents.PlanState})
		trail.Read(audit.KindAddon, audit.Reader{State: ents.AddonState})
	}
	if creds != nil {
		trail.Read(audit.KindGrant, audit.Reader{State: creds.State, TenantOf: creds.TenantOf})
		trail.Read(audit.KindTopup, audit.Reader{State: creds.TopupState})
	}
}
