package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/riverqueue/river"
)

// privateAddr says why a is not a public address ("" when it is).
func privateAddr(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "link-local" // 169.254.169.254, the clouds' metadata service, included
	case a.IsUnspecified():
		return "unspecified"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	}
	for _, p := range refused {
		if p.Contains(a) {
			return "reserved"
		}
	}
	return ""
}

// refused are further ranges no public receiver lives in: carrier-grade
// NAT, the metadata services' IPv6 address (AWS fd00:ec2::254 is in
// IsPrivate), benchmarking, "this network".
var refused = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// errPrivate is a connection refused by the dialer's check.
var errPrivate = errors.New("refused: a private address (WEBHOOK_ALLOW_PRIVATE=true allows it)")

// httpClient is the senders' client: the address is checked when the
// socket connects, after DNS, so a host that resolved to a public address
// at creation and to a private one now (DNS rebinding) is refused too.
// Redirects are not followed (a 3xx is a failed attempt).
func (s *Service) httpClient() *http.Client {
	d := &net.Dialer{Timeout: s.opts.Timeout}
	if !s.opts.AllowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("notify: dial %q: %w", address, err)
			}
			if why := privateAddr(ap.Addr()); why != "" {
				return fmt.Errorf("notify: %s is %s: %w", ap.Addr(), why, errPrivate)
			}
			return nil
		}
	}
	tr := &http.Transport{
		DialContext:           d.DialContext,
		Proxy:                 nil, // a proxy would hide the address from the check
		TLSHandshakeTimeout:   s.opts.Timeout,
		ResponseHeaderTimeout: s.opts.Timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       s.opts.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// sign returns webhook-signature's value for the secrets (whsec_ + base64
// key): "v1,<sig>" per secret, space separated (Standard Webhooks 1.0).
func sign(secrets []string, id string, ts int64, body []byte) (string, error) {
	parts := make([]string, 0, len(secrets))
	for _, sec := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, "whsec_"))
		if err != nil {
			return "", fmt.Errorf("notify: a stored secret is not base64: %w", err)
		}
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "."))
		m.Write(body)
		parts = append(parts, "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	return strings.Join(parts, " "), nil
}

// DeliverWorker POSTs one delivery; River retries it on Options.Backoff.
type DeliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	svc    *Service
	client *http.Client
}

// NextRetry follows WEBHOOK_RETRY_BACKOFF.
func (w *DeliverWorker) NextRetry(job *river.Job[DeliverArgs]) time.Time {
	b := w.svc.opts.Backoff
	i := min(max(job.Attempt-1, 0), len(b)-1)
	return time.Now().Add(b[i])
}

// Timeout leaves room for the POST's own bound.
func (w *DeliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return w.svc.opts.Timeout + 10*time.Second
}

// Work sends the delivery once and records what the receiver said.
func (w *DeliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	var (
		eventID, endpointID, url, status, secret string
		prev                                     *string
		prevUntil                                *time.Time
		enabled                                  bool
		gen                                      int
		body                                     []byte
	)
	err := w.svc.db.QueryRow(ctx, `SELECT d.event_id, e.id::text, d.status, e.url, e.enabled, e.secret, e.prev_secret, e.prev_until, ev.payload::text, d.gen
FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id JOIN webhook_events ev ON ev.id = d.event_id
WHERE d.id = $1`, job.Args.DeliveryID).Scan(&eventID, &endpointID, &status, &url, &enabled, &secret, &prev, &prevUntil, &body, &gen)
	if err != nil {
		if errors.Is(err, pgxErrNoRows) {
			return nil // the endpoint was deleted: nothing to send
		}
		return fmt.Errorf("notify: load delivery %d: %w", job.Args.DeliveryID, err)
	}
	if status != "pending" || gen != job.Args.Gen {
		return nil // delivered, or superseded by a retry-now or replay's job
	}
	if !enabled {
		return w.finish(ctx, job, endpointID, 0, "", errors.New("endpoint disabled"))
	}
	cur, err := w.svc.box.open(endpointID, secret)
	if err != nil {
		return w.finish(ctx, job, endpointID, 0, "", err)
	}
	secrets := []string{cur}
	now := w.svc.opts.Now()
	if prev != nil && prevUntil != nil && now.Before(*prevUntil) {
		old, err := w.svc.box.open(endpointID, *prev)
		if err != nil {
			return w.finish(ctx, job, endpointID, 0, "", err)
		}
		secrets = append(secrets, old)
	}
	ts := now.Unix()
	sig, err := sign(secrets, eventID, ts, body)
	if err != nil {
		return w.finish(ctx, job, endpointID, 0, "", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return w.finish(ctx, job, endpointID, 0, "", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Tollgate-Webhooks/1")
	req.Header.Set("webhook-id", eventID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := w.client.Do(req)
	if err != nil {
		return w.finish(ctx, job, endpointID, 0, "", err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return w.finish(ctx, job, endpointID, resp.StatusCode, string(snippet), nil)
	}
	return w.finish(ctx, job, endpointID, resp.StatusCode, string(snippet), fmt.Errorf("receiver answered %d", resp.StatusCode))
}

// finish records an attempt. A failure is returned to River for a retry,
// or, on the last attempt, marks the delivery failed.
func (w *DeliverWorker) finish(ctx context.Context, job *river.Job[DeliverArgs], endpointID string, code int, body string, sendErr error) error {
	body = truncate(body, 512)
	var codeArg *int
	if code != 0 {
		codeArg = &code
	}
	status := "delivered"
	var errText *string
	if sendErr != nil {
		status = "pending"
		if job.Attempt >= job.MaxAttempts {
			status = "failed"
		}
		t := truncate(sendErr.Error(), 512)
		errText = &t
	}
	_, err := w.svc.db.Exec(ctx, `UPDATE webhook_deliveries SET status = $2, attempts = attempts + 1, last_code = $3,
    last_body = $4, last_error = $5, last_attempt_at = now(),
    delivered_at = CASE WHEN $2 = 'delivered' THEN now() END
WHERE id = $1 AND gen = $6`, job.Args.DeliveryID, status, codeArg, body, errText, job.Args.Gen)
	if err != nil {
		return fmt.Errorf("notify: record attempt: %w", err)
	}
	if err := w.svc.trackFailing(ctx, endpointID, sendErr); err != nil {
		return err
	}
	if sendErr == nil {
		return nil
	}
	w.svc.log.WarnContext(ctx, "webhook delivery failed", "delivery_id", job.Args.DeliveryID, "attempt", job.Attempt, "status_code", code, "err", sendErr, "final", status == "failed")
	if status == "failed" {
		return river.JobCancel(fmt.Errorf("notify: delivery failed: %w", sendErr))
	}
	return fmt.Errorf("notify: delivery: %w", sendErr)
}

// disableAfter is how long an endpoint may fail without one delivered
// attempt before the sender disables it.
const disableAfter = 5 * 24 * time.Hour

// trackFailing keeps the endpoint's failing streak: a delivered attempt
// ends it, a failed one starts it, and a failed one 5 days or more into it
// disables the endpoint, saying why (the clock is Options.Now, so tests
// move it).
func (s *Service) trackFailing(ctx context.Context, endpointID string, sendErr error) error {
	if sendErr == nil {
		if _, err := s.db.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL`, endpointID); err != nil {
			return fmt.Errorf("notify: failing streak: %w", err)
		}
		return nil
	}
	now := s.opts.Now()
	reason := truncate(fmt.Sprintf("failing for %s straight; last error: %v", "5 days", sendErr), 512)
	var disabled bool
	err := s.db.QueryRow(ctx, `UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, $2),
    enabled = enabled AND NOT coalesce(failing_since <= $3, false),
    disabled_at = CASE WHEN enabled AND failing_since <= $3 THEN $2 ELSE disabled_at END,
    disabled_reason = CASE WHEN enabled AND failing_since <= $3 THEN $4 ELSE disabled_reason END
WHERE id = $1 RETURNING disabled_at IS NOT DISTINCT FROM $2`, endpointID, now, now.Add(-disableAfter), reason).Scan(&disabled)
	if errors.Is(err, pgxErrNoRows) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return fmt.Errorf("notify: failing streak: %w", err)
	}
	if disabled {
		s.log.WarnContext(ctx, "webhook endpoint disabled", "endpoint_id", endpointID, "reason", reason)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
