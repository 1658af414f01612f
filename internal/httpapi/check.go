package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
	"github.com/tollgatehq/tollgate/limiter/tgserver"
)

// Limits of POST /v1/check (contract.md).
const (
	checkMaxCost  = 1000
	checkMaxBytes = 4 << 10
)

var checkMeterRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

// checkRequest is the body of POST /v1/check; every field is optional.
// cost is raw so that 1.5, "x" and 1e3 are refused with one clear message.
type checkRequest struct {
	Cost    json.RawMessage `json:"cost"`
	Meter   *string         `json:"meter"`
	Reserve *bool           `json:"reserve"`
	// Concurrency takes a slot of the plan's concurrency limit, held until
	// DELETE /v1/leases/{id} or its expiry.
	Concurrency *bool `json:"concurrency"`
}

// checkResponse is the 200 answer; a refusal is the limiter's problem body
// (the same fields plus allowed=false, policy, retry_after).
type checkResponse struct {
	Allowed     bool                      `json:"allowed"`
	Plan        string                    `json:"plan"`
	Policies    []limithttp.ProblemPolicy `json:"policies"`
	Reservation *reservationJSON          `json:"reservation,omitempty"`
	// Lease is the slot taken with "concurrency": true; absent when none was
	// asked for or the plan has no concurrency limit.
	Lease *leaseJSON `json:"lease,omitempty"`
}

// leaseJSON is the concurrency slot of a "concurrency": true check.
type leaseJSON struct {
	ID        string    `json:"id"`
	ExpiresAt time.Time `json:"expires_at"`
}

// reservationJSON is the reservation of a "reserve": true check: settle it
// with POST /v1/reservations/{id}/settle, cancel it with DELETE
// /v1/reservations/{id}; unsettled, it expires at its estimate.
type reservationJSON struct {
	ID        string    `json:"id"`
	Estimate  int64     `json:"estimate"`
	ExpiresAt time.Time `json:"expires_at"`
}

// handleCheck is POST /v1/check: the limiter's decision for backends that
// do not run Go. It takes the tenant's rate and the meter's quota, cost
// units of each, in one decision.
func (s *Server) handleCheck() echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.Limiter == nil {
			return apperr.New(apperr.Unavailable, "the rate limiter is not configured")
		}
		req, err := parseCheck(c)
		if err != nil {
			// A bad request still passes the rate limit (cost 1), so that
			// garbage is not a free way to hammer, and carries the headers.
			if d, derr := s.decide(c, limiter.Request{Cost: 1, SkipQuota: true}); derr != nil || d == nil {
				return derr
			}
			return err
		}
		if req.Meter != keyspace.DefaultMeter {
			// A meter no plan defines is a mistake (a typo would otherwise
			// be "unlimited" forever); one the tenant's plan leaves without
			// a quota is unlimited and allowed.
			known, err := s.Catalogue.MeterDefined(c.Request().Context(), req.Meter)
			if err != nil {
				return s.unavailable(c, err)
			}
			if !known {
				if d, derr := s.decide(c, limiter.Request{Cost: 1, SkipQuota: true}); derr != nil || d == nil {
					return derr
				}
				msg := fmt.Sprintf("no plan defines the meter %q", req.Meter)
				return writeProblem(c, map[string]any{
					"type": ProblemBase + "unknown-meter", "title": "Unknown meter", "status": http.StatusUnprocessableEntity,
					"detail": msg, "errors": []map[string]string{{"field": "meter", "message": msg}},
				}, http.StatusUnprocessableEntity)
			}
		}
		d, err := s.decide(c, req)
		if err != nil || d == nil {
			return err
		}
		out := checkResponse{Allowed: true, Plan: d.Plan, Policies: limithttp.Policies(d)}
		if li, ok := tgserver.Lease(d); ok {
			out.Lease = &leaseJSON{ID: li.ID, ExpiresAt: li.ExpiresAt.UTC()}
		} else {
			// A slot held in process (Redis did not answer, fail mode
			// local) has no id another request could release: give it
			// back now rather than hold it for ever.
			_ = d.Release(context.WithoutCancel(c.Request().Context()))
		}
		if r := d.Reservation; r != nil {
			out.Reservation = &reservationJSON{ID: r.ID, Estimate: r.Estimate, ExpiresAt: r.ExpiresAt.UTC()}
		} else if req.Reserve {
			// The fail modes decided (Redis down): nothing could be held.
			return apperr.New(apperr.Unavailable, "the reservation could not be recorded; retry")
		}
		return writeCheck(c, &out)
	}
}

// writeCheck answers the 200 of a check. The common answer (no lease, no
// reservation) is written by appendCheck: encoding/json's reflection was a
// tenth of the handler's CPU. Others go through encoding/json.
func writeCheck(c echo.Context, out *checkResponse) error {
	if out.Lease != nil || out.Reservation != nil {
		return c.JSON(http.StatusOK, out)
	}
	bp := checkBufs.Get().(*[]byte)
	defer checkBufs.Put(bp)
	*bp = appendCheck((*bp)[:0], out)
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, *bp)
}

var checkBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// appendCheck appends the JSON of a check's answer without a lease or a
// reservation, byte for byte what encoding/json's Encoder writes
// (TestAppendCheckIsEncodingJSON).
func appendCheck(b []byte, out *checkResponse) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, out.Allowed)
	b = append(b, `,"plan":`...)
	b = appendJSONString(b, out.Plan)
	b = append(b, `,"policies":`...)
	if out.Policies == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, p := range out.Policies {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = appendJSONString(b, p.Name)
			b = append(b, `,"limit":`...)
			b = strconv.AppendInt(b, p.Limit, 10)
			b = append(b, `,"remaining":`...)
			b = strconv.AppendInt(b, p.Remaining, 10)
			b = append(b, `,"reset":`...)
			b = strconv.AppendInt(b, p.Reset, 10)
			if p.Window != 0 {
				b = append(b, `,"window":`...)
				b = strconv.AppendInt(b, p.Window, 10)
			}
			if p.Unit != "" {
				b = append(b, `,"unit":`...)
				b = appendJSONString(b, p.Unit)
			}
			if p.Mode != "" {
				b = append(b, `,"mode":`...)
				b = appendJSONString(b, string(p.Mode))
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}

// appendJSONString appends s as encoding/json does (HTML-safe): plain
// printable ASCII as it is, anything else through json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// parseCheck reads the optional body: an empty body is cost 1 on the meter
// "requests".
func parseCheck(c echo.Context) (limiter.Request, error) {
	req := limiter.Request{Cost: 1, Meter: keyspace.DefaultMeter}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, checkMaxBytes))
	if err != nil {
		return req, jsonError(err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return req, nil
	}
	var in checkRequest
	if err := decodeJSONBytes(body, &in); err != nil {
		return req, err
	}
	var v apperr.Validation
	if raw := bytes.TrimSpace(in.Cost); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || n < 1 || n > checkMaxCost {
			v.Add("cost", "must be a whole number from 1 to %d, not %s", checkMaxCost, truncate(string(raw), 40))
		} else {
			req.Cost = n
		}
	}
	if in.Reserve != nil {
		req.Reserve = *in.Reserve
	}
	if in.Concurrency != nil {
		req.Concurrency = *in.Concurrency
	}
	if in.Meter != nil {
		if !checkMeterRE.MatchString(*in.Meter) {
			v.Add("meter", "must match [a-z0-9_.-]{1,64}")
		} else {
			req.Meter = *in.Meter
		}
	}
	return req, v.Err()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// leaseIDRE is the form of the limiter's lease ids (12 random bytes, hex).
var leaseIDRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

// handleReleaseLease is DELETE /v1/leases/{id}: gives back a concurrency
// slot taken by POST /v1/check. Leases are kept per tenant, so another
// tenant's id is as unknown as a made-up one: 404 for both, and for one
// released already or expired (its slot is free either way).
func (s *Server) handleReleaseLease() echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.Limiter == nil {
			return apperr.New(apperr.Unavailable, "the rate limiter is not configured")
		}
		id := c.Param("id")
		if !leaseIDRE.MatchString(id) {
			return apperr.New(apperr.NotFound, "no such lease")
		}
		found, err := tgserver.ReleaseLease(c.Request().Context(), s.Limiter, tenantIDFrom(c), id)
		if err != nil {
			return s.limiterError(c, err)
		}
		if !found {
			return apperr.New(apperr.NotFound, "no such lease (released, expired or never issued)")
		}
		return c.NoContent(http.StatusNoContent)
	}
}
