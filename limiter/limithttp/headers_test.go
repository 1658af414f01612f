package limithttp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
)

// sfItem is one member of an RFC 8941 list (inner lists are not produced
// by WriteHeaders and are rejected).
type sfItem struct {
	value  any // int64, float64, string (sf-string), sfToken, bool
	params map[string]any
}

type sfToken string

// parseSFList is a strict RFC 8941 §4.2.1 list parser.
func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: s}
	p.skipSP()
	var out []sfItem
	if p.eof() {
		return nil, nil
	}
	for {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.skipOWS()
		if p.eof() {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, fmt.Errorf("at %d: want ',' got %q", p.i, p.s[p.i])
		}
		p.i++
		p.skipOWS()
		if p.eof() {
			return nil, fmt.Errorf("trailing comma")
		}
	}
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }
func (p *sfParser) skipSP() {
	for !p.eof() && p.s[p.i] == ' ' {
		p.i++
	}
}
func (p *sfParser) skipOWS() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bare()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{value: v, params: map[string]any{}}
	for !p.eof() && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var pv any = true
		if !p.eof() && p.s[p.i] == '=' {
			p.i++
			if pv, err = p.bare(); err != nil {
				return sfItem{}, err
			}
		}
		it.params[k] = pv
	}
	return it, nil
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || (c >= 'A' && c <= 'Z') }

func (p *sfParser) key() (string, error) {
	if p.eof() || !(isLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", fmt.Errorf("at %d: bad key start", p.i)
	}
	st := p.i
	for !p.eof() {
		c := p.s[p.i]
		if isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*' {
			p.i++
			continue
		}
		break
	}
	return p.s[st:p.i], nil
}

func (p *sfParser) bare() (any, error) {
	if p.eof() {
		return nil, fmt.Errorf("unexpected end")
	}
	c := p.s[p.i]
	switch {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, fmt.Errorf("bad boolean")
	case isAlpha(c) || c == '*':
		st := p.i
		for !p.eof() {
			c := p.s[p.i]
			if c > ' ' && c < 0x7f && !strings.ContainsRune(`"(),;<=>?@[\]{}`, rune(c)) || c == ':' || c == '/' {
				p.i++
				continue
			}
			break
		}
		return sfToken(p.s[st:p.i]), nil
	}
	return nil, fmt.Errorf("at %d: unexpected %q", p.i, c)
}

func (p *sfParser) number() (any, error) {
	st := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits, dot := 0, -1
	for !p.eof() {
		c := p.s[p.i]
		if isDigit(c) {
			digits++
			p.i++
		} else if c == '.' && dot < 0 {
			dot = digits
			p.i++
		} else {
			break
		}
	}
	if digits == 0 {
		return nil, fmt.Errorf("number without digits")
	}
	if dot < 0 {
		if digits > 15 {
			return nil, fmt.Errorf("integer over 15 digits")
		}
		n, err := strconv.ParseInt(p.s[st:p.i], 10, 64)
		return n, err
	}
	if dot > 12 || digits-dot > 3 || digits == dot {
		return nil, fmt.Errorf("bad decimal")
	}
	return strconv.ParseFloat(p.s[st:p.i], 64)
}

func (p *sfParser) str() (string, error) {
	p.i++
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.eof() || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", fmt.Errorf("bad escape")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("non-printable %q in string", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("unterminated string")
}

// checkHeaders asserts every header WriteHeaders set is well formed and
// consistent with the decision.
func checkHeaders(t testing.TB, h http.Header, d *limiter.Decision) {
	t.Helper()
	pol, err := parseSFList(h.Get("RateLimit-Policy"))
	if err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", h.Get("RateLimit-Policy"), err)
	}
	cur, err := parseSFList(h.Get("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", h.Get("RateLimit"), err)
	}
	if len(pol) != len(d.Policies) || len(cur) != len(d.Policies) {
		t.Fatalf("%d policies, headers %q / %q", len(d.Policies), h.Get("RateLimit-Policy"), h.Get("RateLimit"))
	}
	refusingT := int64(-1)
	for i, it := range cur {
		if _, ok := it.value.(string); !ok {
			t.Fatalf("RateLimit item %d is %T", i, it.value)
		}
		r, ok1 := it.params["r"].(int64)
		tt, ok2 := it.params["t"].(int64)
		if !ok1 || !ok2 || r < 0 || tt < 0 {
			t.Fatalf("RateLimit item %d params %v", i, it.params)
		}
		if q, ok := pol[i].params["q"].(int64); !ok || q < 0 {
			t.Fatalf("RateLimit-Policy item %d params %v", i, pol[i].params)
		}
		if !d.Allowed && d.Policies[i].Name == d.Policy {
			refusingT = tt
		}
	}
	for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if v := h.Get(k); v != "" {
			if items, err := parseSFList(v); err != nil || len(items) != 1 {
				t.Fatalf("%s %q: %v", k, v, err)
			}
		} else if len(d.Policies) > 0 {
			t.Fatalf("no %s", k)
		}
	}
	if !d.Allowed {
		ra, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
		if err != nil || ra < 1 || ra < refusingT {
			t.Fatalf("Retry-After %q with refusing t=%d", h.Get("Retry-After"), refusingT)
		}
	} else if h.Get("Retry-After") != "" {
		t.Fatalf("Retry-After on an allowed decision")
	}
}

func FuzzWriteHeaders(f *testing.F) {
	f.Add("rate", int64(200), int64(57), int64(1500*time.Millisecond), int64(10*time.Second), false, "", int64(0))
	f.Add("requests", int64(100000), int64(0), int64(30*24*time.Hour), int64(30*24*time.Hour), true, "", int64(2*time.Second))
	f.Add("we\"ird\\ na\x00me\xff", int64(-5), int64(1<<62), int64(-1), int64(1<<62), false, "concurrent-requests", int64(1<<62))
	f.Fuzz(func(t *testing.T, name string, limit, remaining, reset, window int64, allowed bool, unit string, retry int64) {
		d := &limiter.Decision{
			Allowed: allowed,
			Plan:    "pro",
			Policies: []limiter.PolicyStatus{
				{Name: name, Limit: limit, Remaining: remaining, Reset: time.Duration(reset), Window: time.Duration(window), Unit: unit},
				{Name: "concurrency", Limit: 3, Remaining: 1, Unit: limithttp.UnitConcurrent},
			},
			RetryAfter: time.Duration(retry),
		}
		if !allowed {
			d.Policy = name
		}
		h := http.Header{}
		limithttp.WriteHeaders(h, d)
		checkHeaders(t, h, d)
		if !allowed {
			rec := httptest.NewRecorder()
			limithttp.WriteRefusal(rec, d)
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 429 {
				t.Fatalf("refusal %d %s: %v", rec.Code, rec.Body, err)
			}
		}
	})
}

func TestWriteHeadersContractExample(t *testing.T) {
	d := &limiter.Decision{Allowed: true, Plan: "pro", Policies: []limiter.PolicyStatus{
		{Name: "rate", Limit: 200, Window: 10 * time.Second, Remaining: 57, Reset: 800 * time.Millisecond},
		{Name: "requests", Limit: 100000, Window: 30 * 24 * time.Hour, Remaining: 99000, Reset: 20 * 24 * time.Hour, Mode: "hard"},
		{Name: "concurrency", Limit: 10, Remaining: 9, Unit: limithttp.UnitConcurrent},
	}}
	h := http.Header{}
	limithttp.WriteHeaders(h, d)
	want := map[string]string{
		"RateLimit-Policy":      `"rate";q=200;w=10, "requests";q=100000;w=2592000, "concurrency";q=10;qu="concurrent-requests"`,
		"RateLimit":             `"rate";r=57;t=1, "requests";r=99000;t=1728000, "concurrency";r=9;t=0`,
		"X-RateLimit-Limit":     "200",
		"X-RateLimit-Remaining": "57",
		"X-RateLimit-Reset":     "1",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	checkHeaders(t, h, d)
}

func TestWriteRefusal(t *testing.T) {
	d := &limiter.Decision{Plan: "free", Policy: "requests", RetryAfter: 1500 * time.Millisecond, Policies: []limiter.PolicyStatus{
		{Name: "rate", Limit: 10, Window: time.Second, Remaining: 3},
		{Name: "requests", Limit: 100, Window: time.Hour, Remaining: 0, Reset: 90 * time.Second, Mode: "hard"},
	}}
	rec := httptest.NewRecorder()
	limithttp.WriteRefusal(rec, d)
	if rec.Code != 429 || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if ra := rec.Header().Get("Retry-After"); ra != "90" {
		t.Fatalf("Retry-After %q, want the refusing policy's t (90)", ra)
	}
	var p struct {
		Type, Title, Detail, Plan, Policy string
		Status                            int
		RetryAfter                        int `json:"retry_after"`
		Allowed                           *bool
		Policies                          []map[string]any
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != limithttp.ProblemBase+"quota-exceeded" || p.Title != "Rate limit exceeded" || p.Status != 429 || p.Plan != "free" ||
		p.Policy != "requests" || p.RetryAfter != 90 || p.Allowed == nil || *p.Allowed || len(p.Policies) != 2 || p.Detail == "" {
		t.Fatalf("body %s", rec.Body)
	}
	checkHeaders(t, rec.Header(), d)
}
