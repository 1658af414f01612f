// Package limithttp renders limiter decisions for HTTP: the IETF RateLimit
// headers, the 429 problem body and the 503 of an unavailable limiter, and a
// Middleware that decides every request of a handler.
//
// It is the HTTP half of the limiter: package limiter decides, and imports
// no net/http; a backend that answers in another protocol does not need
// this package.
package limithttp

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
)

// ProblemBase prefixes the problem type URIs of refusals.
const ProblemBase = "https://tollgate.dev/problems/"

// UnitConcurrent is the quota unit of a concurrency policy
// (limiter.PolicyStatus.Unit), named in RateLimit-Policy as qu.
const UnitConcurrent = "concurrent-requests"

// maxSFInt is the largest RFC 8941 integer (15 digits).
const maxSFInt = 999_999_999_999_999

// seconds rounds a duration up to whole seconds, clamped to an RFC 8941
// integer.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(math.Ceil(d.Seconds()))
	if s > maxSFInt {
		return maxSFInt
	}
	return s
}

func clampSF(n int64) int64 {
	if n < 0 {
		return 0
	}
	if n > maxSFInt {
		return maxSFInt
	}
	return n
}

// sfString writes s as an RFC 8941 sf-string: printable ASCII only (other
// bytes become '?'), with '"' and '\' escaped.
func sfString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// RetryAfterSeconds is the Retry-After of a refusal in whole seconds: at
// least 1 and never earlier than the refusing policy's reset.
func RetryAfterSeconds(d *limiter.Decision) int64 {
	s := seconds(d.RetryAfter)
	for _, p := range d.Policies {
		if p.Name == d.Policy {
			if t := seconds(p.Reset); t > s {
				s = t
			}
		}
	}
	if s < 1 {
		s = 1
	}
	return s
}

// WriteHeaders sets the rate-limit headers of a decision:
// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-11,
// RFC 8941 lists, one item per policy), X-RateLimit-Limit, -Remaining and
// -Reset for the policy closest to refusing, and Retry-After on a refusal.
func WriteHeaders(h http.Header, d *limiter.Decision) {
	if d == nil {
		return
	}
	if len(d.Policies) > 0 {
		var pol, cur strings.Builder
		closest := -1
		var closestFrac float64
		for i, p := range d.Policies {
			if i > 0 {
				pol.WriteString(", ")
				cur.WriteString(", ")
			}
			sfString(&pol, p.Name)
			pol.WriteString(";q=")
			pol.WriteString(strconv.FormatInt(clampSF(p.Limit), 10))
			if p.Window > 0 {
				w := seconds(p.Window)
				pol.WriteString(";w=")
				pol.WriteString(strconv.FormatInt(w, 10))
			}
			if p.Unit != "" {
				pol.WriteString(";qu=")
				sfString(&pol, p.Unit)
			}
			sfString(&cur, p.Name)
			cur.WriteString(";r=")
			cur.WriteString(strconv.FormatInt(clampSF(p.Remaining), 10))
			cur.WriteString(";t=")
			cur.WriteString(strconv.FormatInt(seconds(p.Reset), 10))

			frac := 1.0
			if p.Limit > 0 {
				frac = float64(p.Remaining) / float64(p.Limit)
			}
			if !d.Allowed && p.Name == d.Policy {
				frac = -1
			}
			if closest < 0 || frac < closestFrac {
				closest, closestFrac = i, frac
			}
		}
		h.Set("RateLimit-Policy", pol.String())
		h.Set("RateLimit", cur.String())
		p := d.Policies[closest]
		h.Set("X-RateLimit-Limit", strconv.FormatInt(clampSF(p.Limit), 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(clampSF(p.Remaining), 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(seconds(p.Reset), 10))
	}
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(RetryAfterSeconds(d), 10))
	}
}

// Problem is the body of a 429 (RFC 9457 problem+json with the decision).
type Problem struct {
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Status     int             `json:"status"`
	Detail     string          `json:"detail"`
	Plan       string          `json:"plan,omitempty"`
	Policy     string          `json:"policy"`
	RetryAfter int64           `json:"retry_after"`
	Allowed    bool            `json:"allowed"`
	Policies   []ProblemPolicy `json:"policies"`
}

// ProblemPolicy is one policy in a problem body or a /v1/check answer;
// Reset and Window are in seconds.
type ProblemPolicy struct {
	Name      string            `json:"name"`
	Limit     int64             `json:"limit"`
	Remaining int64             `json:"remaining"`
	Reset     int64             `json:"reset"`
	Window    int64             `json:"window,omitempty"`
	Unit      string            `json:"unit,omitempty"`
	Mode      limiter.QuotaMode `json:"mode,omitempty"`
}

// Policies converts a decision's policies for a JSON body.
func Policies(d *limiter.Decision) []ProblemPolicy {
	out := make([]ProblemPolicy, 0, len(d.Policies))
	for _, p := range d.Policies {
		out = append(out, ProblemPolicy{Name: p.Name, Limit: p.Limit, Remaining: p.Remaining, Reset: seconds(p.Reset), Window: seconds(p.Window), Unit: p.Unit, Mode: p.Mode})
	}
	return out
}

// NewProblem builds the problem body of a refusal.
func NewProblem(d *limiter.Decision) Problem {
	p := Problem{Type: ProblemBase + "rate-limited", Title: "Rate limit exceeded", Status: http.StatusTooManyRequests,
		Plan: d.Plan, Policy: d.Policy, RetryAfter: RetryAfterSeconds(d), Policies: Policies(d)}
	kind := "rate limit"
	for _, ps := range d.Policies {
		if ps.Name == d.Policy && ps.Mode != "" {
			p.Type = ProblemBase + "quota-exceeded"
			kind = "quota"
		}
		if ps.Name == d.Policy && ps.Unit == UnitConcurrent {
			kind = "concurrency limit"
		}
	}
	plan := ""
	if d.Plan != "" {
		plan = " of plan " + strconv.Quote(d.Plan)
	}
	p.Detail = "The " + kind + " " + strconv.Quote(d.Policy) + plan + " is exhausted; retry in " + strconv.FormatInt(p.RetryAfter, 10) + "s."
	return p
}

// WriteRefusal answers a refused decision: the headers, 429 and an
// application/problem+json body naming the plan and the policy.
func WriteRefusal(w http.ResponseWriter, d *limiter.Decision) {
	WriteHeaders(w.Header(), d)
	body, _ := json.Marshal(NewProblem(d))
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(append(body, '\n'))
}

// WriteUnavailable answers 503 with Retry-After for ErrUnavailable and
// ErrOverloaded.
func WriteUnavailable(w http.ResponseWriter, err error) {
	title, slug := "Rate limiter unavailable", "limiter-unavailable"
	if errors.Is(err, limiter.ErrOverloaded) {
		title, slug = "Overloaded", "overloaded"
	}
	body, _ := json.Marshal(map[string]any{"type": ProblemBase + slug, "title": title, "status": http.StatusServiceUnavailable, "detail": err.Error()})
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(append(body, '\n'))
}
