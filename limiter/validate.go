package limiter

import (
	"fmt"
	"time"
)

// This file checks the arguments of a decision before any Redis work.

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, a...)...)
}

// validName accepts printable ASCII without spaces, braces (they would break
// the hash tag) or colons (key separators).
func validName(s string, colon bool) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '{' || c == '}' || (!colon && c == ':') {
			return false
		}
	}
	return true
}

func (l *Limiter) validate(tenant string, req *Request) error {
	if !validName(tenant, true) {
		return invalid("tenant %q: want 1-256 printable ASCII characters without spaces or braces", tenant)
	}
	if req.Cost < 0 {
		return invalid("cost %d is negative", req.Cost)
	}
	if req.Cost == 0 {
		req.Cost = 1 // a forgotten cost must never enforce nothing
	}
	if req.Cost > l.opts.MaxCost {
		return invalid("cost %d is over the maximum %d", req.Cost, l.opts.MaxCost)
	}
	if req.Meter == "" {
		req.Meter = DefaultMeter
	} else if !validName(req.Meter, false) {
		return invalid("meter %q: want 1-256 printable ASCII characters without spaces, braces or colons", req.Meter)
	}
	if x := req.Limits; x != nil {
		if x.Rate != nil && (x.Rate.PerSecond <= 0 || x.Rate.Burst < 1) {
			return invalid("explicit rate %+v: want per_second > 0 and burst >= 1", *x.Rate)
		}
		if x.Concurrency < 0 {
			return invalid("explicit concurrency %d is negative", x.Concurrency)
		}
		for _, w := range x.Windows {
			if !validName(w.Name, false) {
				return invalid("window name %q: want printable ASCII without spaces, braces or colons", w.Name)
			}
			if w.Limit < 0 || w.Length < time.Millisecond {
				return invalid("window %q: want limit >= 0 and length >= 1ms", w.Name)
			}
			if w.Kind != "" && w.Kind != WindowSliding && w.Kind != WindowFixed {
				return invalid("window %q: kind %q: want %q or %q", w.Name, w.Kind, WindowSliding, WindowFixed)
			}
		}
	}
	return nil
}
