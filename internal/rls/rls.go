// Package rls serves Envoy's rate limit service protocol
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over gRPC, so
// that Envoy, Envoy Gateway, Istio and Contour enforce a tenant's Stripe plan
// at the gateway with the same decision as POST /v1/check.
//
// A descriptor names its tenant by an `api_key` entry (the tenant's key, as
// Envoy forwards it from a header: "Bearer tg_…" or the bare key) or by a
// `tenant_id` entry when the gateway authenticated the caller itself (then
// the call must carry a service token or ADMIN_TOKEN as gRPC metadata
// `authorization: Bearer …`), or by an `external_id` entry (the backend's
// own id for the tenant, under the same service credential). An optional
// `meter` entry picks the quota;
// the cost is the descriptor's hits_addend, else the request's, else 1.
//
// Envoy lets a request through when the service answers with an error
// (failure_mode_deny is false by default), so nothing that must refuse is
// ever an error here: an unknown or revoked key, a limiter that cannot
// decide and an overloaded instance all answer OVER_LIMIT with the reason in
// the x-tollgate-reason header.
package rls

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
	"github.com/tollgatehq/tollgate/limiter/tgserver"
)

// Descriptor entry keys Tollgate reads.
const (
	EntryAPIKey   = "api_key"
	EntryTenantID = "tenant_id"
	// EntryExternalID names the tenant by its external id. An entry of its
	// own rather than a prefix on tenant_id: Envoy builds descriptors from
	// request headers (request_headers: descriptor_key), and a gateway that
	// forwards a header holding the backend's own id cannot prepend to it.
	EntryExternalID = "external_id"
	EntryMeter      = "meter"
)

// ReasonHeader carries why Tollgate refused a descriptor that no limit
// refused (a credential, an unavailable limiter).
const ReasonHeader = "x-tollgate-reason"

// maxCost matches POST /v1/check's limit on a cost.
const maxCost = 1000

// Keys authenticates the credentials a descriptor or the call carries; the
// entitlements service implements it.
type Keys interface {
	// TenantOfKey returns the tenant of an API key; an unknown or revoked
	// key is an apperr.Unauthorized.
	TenantOfKey(ctx context.Context, rawKey string) (string, error)
	// AuthenticateService accepts a service token (tgs_…).
	AuthenticateService(ctx context.Context, raw string) error
	// MeterDefined reports whether some plan has a quota on meter.
	MeterDefined(ctx context.Context, meter string) (bool, error)
	// TenantOfExternalID returns the tenant an external id names; an
	// unknown one is limiter.ErrUnknownTenant (cmd/api resolves it with the
	// limiter's cached alias: no extra trip once known).
	TenantOfExternalID(ctx context.Context, externalID string) (string, error)
}

// Decider makes the limiter's decision; *limiter.Limiter implements it.
type Decider interface {
	Allow(ctx context.Context, tenant string, req limiter.Request) (*limiter.Decision, error)
}

// Options configure a Server.
type Options struct {
	// Domain is the rate limit domain answered (GRPC_RLS_DOMAIN); requests
	// of another domain are answered OK and counted, as Envoy's own
	// service does with a domain it has no configuration for.
	Domain string
	// AdminToken, when set, is accepted like a service token.
	AdminToken string
	// Log receives decisions that failed; nil discards.
	Log *slog.Logger
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// CanGrow says whether credit grants can still bring units to a
	// tenant's meter (credits.Service.CanGrow): a cost over a hard quota's
	// included units is then an ordinary refusal, not cost-exceeds-limit.
	// nil: no grants.
	CanGrow func(ctx context.Context, tenantID, meter string) (bool, error)
}

// Server answers ShouldRateLimit.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	keys    Keys
	dec     Decider
	opts    Options
	log     *slog.Logger
	answers *prometheus.CounterVec
	foreign prometheus.Counter
}

// New builds a Server.
func New(keys Keys, dec Decider, opts Options) (*Server, error) {
	if opts.Domain == "" {
		opts.Domain = "tollgate"
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{keys: keys, dec: dec, opts: opts, log: log,
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_rls_descriptors_total",
			Help: "Descriptors answered over Envoy's rate limit service protocol, by code (ok, over_limit) and reason (none, or why a descriptor no limit refused was refused: invalid_api_key, missing_credential, unavailable, overloaded, invalid).",
		}, []string{"code", "reason"}),
		foreign: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_rls_foreign_domain_total",
			Help: "ShouldRateLimit calls for a domain other than GRPC_RLS_DOMAIN, answered OK without a decision.",
		}),
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{s.answers, s.foreign} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// ShouldRateLimit decides each descriptor: OVER_LIMIT overall when any is.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() != s.opts.Domain {
		s.foreign.Inc()
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
	}
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	headers := http.Header{}
	service := serviceAuth{s: s, ctx: ctx}
	for _, d := range req.GetDescriptors() {
		st, h := s.descriptor(ctx, req, d, &service)
		out.Statuses = append(out.Statuses, st)
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT && out.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			// The first refusal's headers are what the client sees.
			out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			headers = h
		} else if out.OverallCode == rlsv3.RateLimitResponse_OK && len(headers) == 0 {
			headers = h
		}
	}
	for _, k := range sortedKeys(headers) {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: strings.ToLower(k), Value: headers.Get(k)})
	}
	return out, nil
}

// descriptor decides one descriptor and returns its status and the headers
// the client should see for it.
func (s *Server) descriptor(ctx context.Context, req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor, service *serviceAuth) (*rlsv3.RateLimitResponse_DescriptorStatus, http.Header) {
	var apiKey, tenant, external, meter string
	hasExternal := false
	for _, e := range d.GetEntries() {
		switch e.GetKey() {
		case EntryAPIKey:
			apiKey = strings.TrimSpace(e.GetValue())
			if k, ok := cutBearer(apiKey); ok {
				apiKey = k
			}
		case EntryTenantID:
			tenant = e.GetValue()
		case EntryExternalID:
			external, hasExternal = e.GetValue(), true
		case EntryMeter:
			meter = e.GetValue()
		}
	}
	cost := int64(req.GetHitsAddend())
	if h := d.GetHitsAddend(); h != nil {
		cost = int64(h.GetValue()) // the descriptor's own wins, as in Envoy
	}
	if cost == 0 {
		cost = 1
	}
	switch {
	case apiKey != "":
		id, err := s.keys.TenantOfKey(ctx, apiKey)
		if err != nil {
			if apperr.CodeOf(err) == apperr.Unauthorized {
				return s.refuse("invalid_api_key", "invalid API key")
			}
			s.log.WarnContext(ctx, "rls: key lookup failed", "err", err)
			return s.refuse("unavailable", "cannot check API keys right now; retry")
		}
		tenant = id
	case tenant != "":
		if reason, detail := service.check(); reason != "" {
			return s.refuse(reason, detail)
		}
	case hasExternal:
		if reason, detail := service.check(); reason != "" {
			return s.refuse(reason, detail)
		}
		id, err := s.keys.TenantOfExternalID(ctx, external)
		switch {
		case errors.Is(err, limiter.ErrUnknownTenant):
			// What an unknown tenant_id answers.
			return s.refuse("unknown_tenant", "no tenant "+strconv.Quote(external))
		case err != nil:
			s.log.WarnContext(ctx, "rls: external id lookup failed", "err", err)
			return s.refuse("unavailable", "cannot resolve external ids right now; retry")
		}
		tenant = id
	default:
		return s.refuse("missing_credential", "the descriptor names no api_key, tenant_id or external_id entry")
	}
	if cost > maxCost {
		return s.refuse("invalid", "hits_addend "+strconv.FormatInt(cost, 10)+" is above the limit of "+strconv.Itoa(maxCost))
	}
	if meter == "" {
		meter = keyspace.DefaultMeter
	} else if meter != keyspace.DefaultMeter {
		known, err := s.keys.MeterDefined(ctx, meter)
		if err != nil {
			return s.refuse("unavailable", "cannot read the plans right now; retry")
		}
		if !known {
			return s.refuse("invalid", "no plan defines the meter "+strconv.Quote(meter))
		}
	}
	dec, err := s.dec.Allow(ctx, tenant, limiter.Request{Cost: cost, Meter: meter})
	if err != nil {
		switch {
		case errors.Is(err, limiter.ErrOverloaded):
			return s.refuse("overloaded", err.Error())
		case errors.Is(err, limiter.ErrUnknownTenant):
			return s.refuse("unknown_tenant", "no tenant "+strconv.Quote(tenant))
		case errors.Is(err, limiter.ErrInvalidRequest):
			return s.refuse("invalid", err.Error())
		}
		s.log.WarnContext(ctx, "rls: decision failed", "tenant_id", tenant, "err", err)
		return s.refuse("unavailable", "the rate limiter cannot decide right now; retry")
	}
	h := http.Header{}
	limithttp.WriteHeaders(h, dec)
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if !dec.Allowed {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		if p := impossible(dec, cost); p != nil && !s.grantsCanCover(ctx, tenant, p) {
			h.Set(ReasonHeader, "cost-exceeds-limit")
			h.Del("Retry-After") // waiting never helps
		}
	}
	if p := closest(dec); p != nil {
		st.CurrentLimit = rateLimitOf(p)
		st.LimitRemaining = uint32(min(max(p.Remaining, 0), math.MaxUint32))
		st.DurationUntilReset = durationpb.New(p.Reset.Truncate(time.Millisecond))
	}
	s.answers.WithLabelValues(codeLabel(st.Code), "none").Inc()
	return st, h
}

// refuse answers OVER_LIMIT for a reason no limit gave: Envoy refuses the
// request (429, or its configured status) and the client sees why.
func (s *Server) refuse(reason, detail string) (*rlsv3.RateLimitResponse_DescriptorStatus, http.Header) {
	s.answers.WithLabelValues("over_limit", reason).Inc()
	h := http.Header{}
	h.Set(ReasonHeader, strings.ReplaceAll(reason, "_", "-"))
	h.Set("x-tollgate-detail", detail)
	if reason == "unavailable" || reason == "overloaded" {
		h.Set("Retry-After", "1")
	}
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT}, h
}

// serviceAuth checks the call's service credential once, on the first
// descriptor that names a tenant_id or external_id.
type serviceAuth struct {
	s              *Server
	ctx            context.Context
	done           bool
	reason, detail string
}

func (a *serviceAuth) check() (string, string) {
	if a.done {
		return a.reason, a.detail
	}
	a.done = true
	md, _ := metadata.FromIncomingContext(a.ctx)
	var raw string
	if v := md.Get("authorization"); len(v) > 0 {
		raw, _ = cutBearer(v[0])
	}
	switch {
	case raw == "":
		a.reason, a.detail = "missing_credential", "a tenant_id or external_id descriptor needs a service token as gRPC metadata authorization: Bearer tgs_…"
	case a.s.opts.AdminToken != "" && constantTimeEqual(raw, a.s.opts.AdminToken):
	default:
		if err := a.s.keys.AuthenticateService(a.ctx, raw); err != nil {
			if apperr.CodeOf(err) == apperr.Unauthorized {
				a.reason, a.detail = "invalid_service_token", "invalid service token"
			} else {
				a.reason, a.detail = "unavailable", "cannot check service tokens right now; retry"
			}
		}
	}
	return a.reason, a.detail
}

func cutBearer(v string) (string, bool) {
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:]), true
	}
	return v, false
}

// closest is the policy nearest to refusing, as the X-RateLimit-* headers
// choose it: the refusing policy on a refusal, else the smallest share left.
func closest(d *limiter.Decision) *limiter.PolicyStatus {
	var best *limiter.PolicyStatus
	bestFrac := 0.0
	for i := range d.Policies {
		p := &d.Policies[i]
		frac := 1.0
		if p.Limit > 0 {
			frac = float64(p.Remaining) / float64(p.Limit)
		}
		if !d.Allowed && p.Name == d.Policy {
			frac = -1
		}
		if best == nil || frac < bestFrac {
			best, bestFrac = p, frac
		}
	}
	return best
}

// rateLimitOf expresses a policy in Envoy's terms: units per a unit of
// time. The rate's bucket refills Limit per Window; a quota's Window is its
// period (a month, a year, a day or an hour).
func rateLimitOf(p *limiter.PolicyStatus) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: p.Name}
	if p.Name == keyspace.PolicyRate && p.Window > 0 {
		perSecond := float64(p.Limit) / p.Window.Seconds()
		switch {
		case perSecond >= 1:
			rl.Unit, rl.RequestsPerUnit = rlsv3.RateLimitResponse_RateLimit_SECOND, clampU32(math.Round(perSecond))
		case perSecond*60 >= 1:
			rl.Unit, rl.RequestsPerUnit = rlsv3.RateLimitResponse_RateLimit_MINUTE, clampU32(math.Round(perSecond*60))
		default:
			rl.Unit, rl.RequestsPerUnit = rlsv3.RateLimitResponse_RateLimit_HOUR, clampU32(math.Round(perSecond*3600))
		}
		return rl
	}
	if tgserver.IsWindow(p) {
		rl.Unit, rl.RequestsPerUnit = windowUnit(p.Limit, p.Window)
		return rl
	}
	rl.RequestsPerUnit = clampU32(float64(p.Limit))
	w := p.Window
	switch {
	case w <= 0:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_UNKNOWN // concurrency: no window
	case w >= 365*24*time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_YEAR
	case w >= 28*24*time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_MONTH
	case w >= 7*24*time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_WEEK
	case w >= 24*time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_DAY
	case w >= time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_HOUR
	case w >= time.Minute:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_MINUTE
	default:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	}
	return rl
}

// impossible is the policy of a refusal no wait can lift (a cost above the
// burst or a hard quota's whole limit), as POST /v1/check's 422 does.
func impossible(d *limiter.Decision, cost int64) *limiter.PolicyStatus {
	if d.Fallback != "" || d.Shadow {
		return nil
	}
	for i := range d.Policies {
		p := &d.Policies[i]
		if (p.Name == keyspace.PolicyRate || (p.Mode == limiter.ModeHard && p.Unit == "") || tgserver.IsWindow(p)) && p.Limit < cost {
			return p
		}
	}
	return nil
}

// grantsCanCover says whether credit grants could still admit a cost over
// quota p's included units (Options.CanGrow); a failure to ask is logged
// and taken as yes, as POST /v1/check does: a wrong "cost-exceeds-limit"
// tells Envoy's client never to retry a request that could run.
func (s *Server) grantsCanCover(ctx context.Context, tenant string, p *limiter.PolicyStatus) bool {
	if s.opts.CanGrow == nil || p.Name == keyspace.PolicyRate || tgserver.IsWindow(p) {
		return false
	}
	ok, err := s.opts.CanGrow(ctx, tenant, p.Name)
	if err != nil {
		s.log.WarnContext(ctx, "rls: asking for credit grants failed; an ordinary refusal", "tenant_id", tenant, "meter", p.Name, "err", err)
		return true
	}
	return ok
}

func clampU32(f float64) uint32 {
	switch {
	case f < 0:
		return 0
	case f > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(f)
}

func codeLabel(c rlsv3.RateLimitResponse_Code) string {
	if c == rlsv3.RateLimitResponse_OVER_LIMIT {
		return "over_limit"
	}
	return "ok"
}

func constantTimeEqual(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

func sortedKeys(h http.Header) []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
