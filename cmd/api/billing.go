package main

import (
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// planChanger is billing (plan changes through Stripe) when STRIPE_SECRET_KEY
// is set, else the local change of entitlements.
func planChanger(cfg config.Config, ents *entitlements.Service, bill *billing.Service) entitlements.PlanChanger {
	if cfg.StripeSecretKey != "" && bill != nil {
		return bill
	}
	return ents
}
