package audit

import "strings"

// Kind is what an audited route's subject is.
type Kind int

// Kinds of subject.
const (
	KindTenant Kind = iota + 1
	KindPlan
	KindKey // an API key named by its own id (the tenant is resolved)
	KindEvent
	KindAddon
	KindServiceToken
	KindWebhookEndpoint
	KindGrant // a credit grant named by its own id (the tenant is resolved by credits)
	KindTopup // a top-up mapping named by its Stripe price
)

// targeted says whether subjects of kind k are named by the entry's Target
// alone (no Subject field of their own), so that their reader is given it.
func (k Kind) targeted() bool {
	return k == KindGrant || k == KindTopup || k == KindWebhookEndpoint
}

// Route declares one audited route, the only place that says what it
// records: its action and where its subject comes from. The API and the
// console look their routes up here (RouteOf) rather than guessing the
// subject from the path; their tests check that every mutating admin route
// is declared and every declaration is served.
type Route struct {
	Action string
	Kind   Kind
	// ID is the route parameter naming the subject; "" for a route that
	// creates its subject (named by its answer, see Created).
	ID string
	// Form is the form field naming the subject when the route has no
	// parameter for it (the console's add-on form).
	Form string
	// Target is the route parameter naming the object inside the subject
	// (an override or API key id); "" = the created object's id, if any.
	Target string
	// StateOf, when set, is whose state the entry records instead of the
	// subject's own: a grant created in a tenant records the grant, read
	// by its owner (Log.Read).
	StateOf Kind
}

// Routes are every audited route of the admin API (/admin/v1) and the
// console (/admin), by "METHOD path" as the router writes it.
var Routes = map[string]Route{
	// Admin API.
	"POST /admin/v1/plans":                                               {Action: "plan.create", Kind: KindPlan},
	"PATCH /admin/v1/plans/:key":                                         {Action: "plan.edit", Kind: KindPlan, ID: "key"},
	"POST /admin/v1/plans/:key/migrate":                                  {Action: "plan.migrate", Kind: KindPlan, ID: "key"},
	"PUT /admin/v1/addons/:price_id":                                     {Action: "addon.put", Kind: KindAddon, ID: "price_id"},
	"DELETE /admin/v1/addons/:price_id":                                  {Action: "addon.delete", Kind: KindAddon, ID: "price_id"},
	"POST /admin/v1/tenants":                                             {Action: "tenant.create", Kind: KindTenant},
	"PATCH /admin/v1/tenants/:id":                                        {Action: "tenant.edit", Kind: KindTenant, ID: "id"},
	"PUT /admin/v1/tenants/:id/plan":                                     {Action: "tenant.plan_change", Kind: KindTenant, ID: "id"},
	"POST /admin/v1/tenants/:id/api-keys":                                {Action: "api_key.issue", Kind: KindTenant, ID: "id"},
	"DELETE /admin/v1/api-keys/:id":                                      {Action: "api_key.revoke", Kind: KindKey, ID: "id"},
	"POST /admin/v1/tenants/:id/overrides":                               {Action: "override.create", Kind: KindTenant, ID: "id"},
	"DELETE /admin/v1/tenants/:id/overrides/:override_id":                {Action: "override.delete", Kind: KindTenant, ID: "id", Target: "override_id"},
	"POST /admin/v1/stripe/events/:id/replay":                            {Action: "stripe_event.replay", Kind: KindEvent, ID: "id"},
	"POST /admin/v1/tenants/:id/resync":                                  {Action: "tenant.resync", Kind: KindTenant, ID: "id"},
	"POST /admin/v1/service-tokens":                                      {Action: "service_token.issue", Kind: KindServiceToken},
	"DELETE /admin/v1/service-tokens/:id":                                {Action: "service_token.revoke", Kind: KindServiceToken, ID: "id"},
	"POST /admin/v1/webhook-endpoints":                                   {Action: "webhook_endpoint.create", Kind: KindWebhookEndpoint},
	"PATCH /admin/v1/webhook-endpoints/:id":                              {Action: "webhook_endpoint.edit", Kind: KindWebhookEndpoint, ID: "id"},
	"DELETE /admin/v1/webhook-endpoints/:id":                             {Action: "webhook_endpoint.delete", Kind: KindWebhookEndpoint, ID: "id"},
	"POST /admin/v1/webhook-endpoints/:id/rotate-secret":                 {Action: "webhook_endpoint.rotate_secret", Kind: KindWebhookEndpoint, ID: "id"},
	"POST /admin/v1/webhook-endpoints/:id/deliveries/:delivery_id/retry": {Action: "webhook_delivery.retry", Kind: KindWebhookEndpoint, ID: "id"},
	"POST /admin/v1/webhook-endpoints/:id/events/:event_id/replay":       {Action: "webhook_event.replay", Kind: KindWebhookEndpoint, ID: "id"},
	"POST /admin/v1/tenants/:id/dashboard-links":                         {Action: "dashboard_link.issue", Kind: KindTenant, ID: "id"},
	"POST /admin/v1/tenants/:id/grants":                                  {Action: "grant.create", Kind: KindTenant, ID: "id", StateOf: KindGrant},
	"POST /admin/v1/grants/:id/void":                                     {Action: "grant.void", Kind: KindGrant, ID: "id"},
	"PUT /admin/v1/topups/:price_id":                                     {Action: "topup.put", Kind: KindTopup, ID: "price_id"},
	"DELETE /admin/v1/topups/:price_id":                                  {Action: "topup.delete", Kind: KindTopup, ID: "price_id"},
	// Console.
	"POST /admin/tenants":                             {Action: "tenant.create", Kind: KindTenant},
	"POST /admin/tenants/:id/plan":                    {Action: "tenant.plan_change", Kind: KindTenant, ID: "id"},
	"POST /admin/tenants/:id/external-id":             {Action: "tenant.edit", Kind: KindTenant, ID: "id"},
	"POST /admin/tenants/:id/keys":                    {Action: "api_key.issue", Kind: KindTenant, ID: "id"},
	"POST /admin/tenants/:id/keys/:key/revoke":        {Action: "api_key.revoke", Kind: KindTenant, ID: "id", Target: "key"},
	"POST /admin/tenants/:id/overrides":               {Action: "override.create", Kind: KindTenant, ID: "id"},
	"POST /admin/tenants/:id/overrides/:oid/delete":   {Action: "override.delete", Kind: KindTenant, ID: "id", Target: "oid"},
	"POST /admin/tenants/:id/grants":                  {Action: "grant.create", Kind: KindTenant, ID: "id", StateOf: KindGrant},
	"POST /admin/tenants/:id/grants/:gid/void":        {Action: "grant.void", Kind: KindGrant, ID: "gid"},
	"POST /admin/tenants/:id/dashboard-link":          {Action: "dashboard_link.issue", Kind: KindTenant, ID: "id"},
	"POST /admin/tenants/:id/resync":                  {Action: "tenant.resync", Kind: KindTenant, ID: "id"},
	"POST /admin/plans":                               {Action: "plan.create", Kind: KindPlan},
	"POST /admin/plans/:key":                          {Action: "plan.edit", Kind: KindPlan, ID: "key"},
	"POST /admin/addons":                              {Action: "addon.put", Kind: KindAddon, Form: "stripe_price_id"},
	"POST /admin/addons/:price/delete":                {Action: "addon.delete", Kind: KindAddon, ID: "price"},
	"POST /admin/events/:id/replay":                   {Action: "stripe_event.replay", Kind: KindEvent, ID: "id"},
	"POST /admin/webhooks":                            {Action: "webhook_endpoint.create", Kind: KindWebhookEndpoint},
	"POST /admin/webhooks/:wid":                       {Action: "webhook_endpoint.edit", Kind: KindWebhookEndpoint, ID: "wid"},
	"POST /admin/webhooks/:wid/delete":                {Action: "webhook_endpoint.delete", Kind: KindWebhookEndpoint, ID: "wid"},
	"POST /admin/webhooks/:wid/rotate-secret":         {Action: "webhook_endpoint.rotate_secret", Kind: KindWebhookEndpoint, ID: "wid"},
	"POST /admin/webhooks/:wid/deliveries/:did/retry": {Action: "webhook_delivery.retry", Kind: KindWebhookEndpoint, ID: "wid"},
	"POST /admin/webhooks/:wid/events/:eid/replay":    {Action: "webhook_event.replay", Kind: KindWebhookEndpoint, ID: "wid"},
}

// Unaudited are the mutating admin routes that record nothing, and why.
var Unaudited = map[string]string{
	"POST /admin/login":         "opens a session; changes nothing",
	"POST /admin/logout":        "ends a session; changes nothing",
	"POST /admin/events/replay": "bulk replay: each replayed event is recorded as its own stripe_event.replay",
}

// RouteOf is the declaration of the route method path, if it is audited.
func RouteOf(method, path string) (Route, bool) {
	r, ok := Routes[method+" "+path]
	return r, ok
}

// Subject is the subject the request names: param reads a route
// parameter, form a form field (nil when the route has none).
func (r Route) Subject(param, form func(string) string) Subject {
	id := ""
	switch {
	case r.ID != "":
		id = param(r.ID)
	case r.Form != "" && form != nil:
		id = strings.TrimSpace(form(r.Form))
	}
	var s Subject
	if id != "" {
		s = r.named(id)
	}
	if r.Target != "" {
		if t := param(r.Target); t != "" {
			s.Target = t
		}
	}
	s.kind, s.stateOf = r.Kind, r.StateOf
	if s.stateOf == 0 {
		s.stateOf = r.Kind
	}
	return s
}

// named is the subject of kind r.Kind named id.
func (r Route) named(id string) Subject {
	switch r.Kind {
	case KindTenant:
		return Subject{TenantID: id}
	case KindPlan:
		return Subject{PlanKey: id}
	case KindKey:
		return Subject{KeyID: id}
	case KindEvent:
		return Subject{EventID: id}
	case KindAddon:
		return Subject{AddonPriceID: id, Target: id}
	case KindServiceToken:
		return Subject{ServiceTokenID: id, Target: id}
	}
	return Subject{Target: id} // a webhook endpoint: its id is all there is
}

// Created is the subject a route's answer names: the created subject
// itself for a route without ID (a new plan, tenant, service token,
// webhook endpoint), else the created object inside it (a key or an
// override id) as the Target.
func (r Route) Created(id string) Subject {
	if r.ID == "" && r.Form == "" {
		return r.named(id)
	}
	return Subject{Target: id}
}
