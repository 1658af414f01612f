package web

import (
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/tollgatehq/tollgate/internal/numfmt"
)

// funcs are the templates' helpers: formatting only, no logic.
var funcs = template.FuncMap{
	"int":  numfmt.Int,
	"intp": func(p *int64) string { return fmtIntPtr(p, "—") },
	// goDuration shows a stored Go duration ("720h0m0s") as people read
	// it ("30 days"); one that does not parse is shown as it is.
	"goDuration": func(s string) string {
		d, err := time.ParseDuration(s)
		if err != nil {
			return s
		}
		return fmtDuration(d)
	},
	"date":     func(t time.Time) string { return t.UTC().Format("2 Jan 2006") },
	"datetime": fmtTime,
	"timep": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return fmtTime(*t)
	},
	"iso":     func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"isodate": func(t time.Time) string { return t.UTC().Format(time.DateOnly) },
	"day":     func(t time.Time) string { return t.UTC().Format("Mon 2 Jan") },
	"join":    strings.Join,
	"float":   func(p *float64) string { return fmtFloatPtr(p) },
	"strp": func(p *string) string {
		if p == nil {
			return "—"
		}
		return *p
	},
	"add": func(a, b int) int { return a + b },
	"dict": func(kv ...any) map[string]any {
		m := make(map[string]any, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			m[k] = kv[i+1]
		}
		return m
	},
	"sub": func(a, b int) int { return a - b },
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2 Jan 2006 15:04 UTC")
}

func fmtIntPtr(p *int64, none string) string {
	if p == nil {
		return none
	}
	return numfmt.Int(*p)
}

func fmtFloatPtr(p *float64) string {
	if p == nil {
		return "—"
	}
	return strconv.FormatFloat(*p, 'f', -1, 64)
}

// fmtDuration says how long d is in the two largest units people care
// about: "3 days 4 hours", "5 hours 2 minutes", "under a minute".
func fmtDuration(d time.Duration) string {
	if d < time.Minute {
		return "under a minute"
	}
	days := int64(d / (24 * time.Hour))
	hours := int64(d/time.Hour) % 24
	mins := int64(d/time.Minute) % 60
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return strconv.FormatInt(n, 10) + " " + one + "s"
	}
	switch {
	case days > 0 && hours > 0:
		return unit(days, "day") + " " + unit(hours, "hour")
	case days > 0:
		return unit(days, "day")
	case hours > 0 && mins > 0:
		return unit(hours, "hour") + " " + unit(mins, "minute")
	case hours > 0:
		return unit(hours, "hour")
	default:
		return unit(mins, "minute")
	}
}
