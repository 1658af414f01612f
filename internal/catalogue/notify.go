package catalogue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// maxNotify is how many thresholds one quota may have.
const maxNotify = 10

// NotifyInput is one entry of a quota's "notify": a percentage of the
// limit (50, or {"percent": 50}) or a number of units ({"units": 5000}).
// Decoding never fails: a bad entry is reported by Validate, naming it.
type NotifyInput struct {
	keyspace.QuotaThreshold
	bad string
}

// UnmarshalJSON takes a number (a percentage) or an object.
func (n *NotifyInput) UnmarshalJSON(b []byte) error {
	*n = NotifyInput{}
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] != '{' {
		if err := json.Unmarshal(b, &n.Percent); err != nil {
			n.bad = `must be a whole percentage (80), {"percent": 80} or {"units": 5000}`
		}
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&n.QuotaThreshold); err != nil {
		n.bad = `must be {"percent": n} or {"units": n}`
	}
	return nil
}

// MarshalJSON writes the object form.
func (n NotifyInput) MarshalJSON() ([]byte, error) { return json.Marshal(n.QuotaThreshold) }

// ValidateNotify checks a quota's thresholds, naming fields as
// field[i] (e.g. quotas.requests.notify[1]); an override's are checked
// alike (entitlements).
func ValidateNotify(v *apperr.Validation, field string, ns []NotifyInput) {
	if len(ns) > maxNotify {
		v.Add(field, "must have at most %d thresholds", maxNotify)
	}
	seen := map[keyspace.QuotaThreshold]bool{}
	for i, n := range ns {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case n.bad != "":
			v.Add(f, "%s", n.bad)
		case n.Percent != 0 && n.Units != 0:
			v.Add(f, "give percent or units, not both")
		case n.Percent == 0 && n.Units == 0:
			v.Add(f, "must be a percentage 1-100 or a number of units")
		case n.Percent < 0 || n.Percent > 100:
			v.Add(f, "percent must be 1-100")
		case n.Units < 0:
			v.Add(f, "units must be greater than 0")
		case seen[n.QuotaThreshold]:
			v.Add(f, "is given twice")
		}
		seen[n.QuotaThreshold] = true
	}
}

// Thresholds returns ns as stored: sorted (percentages first), nil when
// empty (the default).
func Thresholds(ns []NotifyInput) []keyspace.QuotaThreshold {
	if len(ns) == 0 {
		return nil
	}
	out := make([]keyspace.QuotaThreshold, len(ns))
	for i, n := range ns {
		out[i] = n.QuotaThreshold
	}
	slices.SortFunc(out, func(a, b keyspace.QuotaThreshold) int {
		if (a.Percent == 0) != (b.Percent == 0) {
			if a.Percent != 0 {
				return -1
			}
			return 1
		}
		if a.Percent != b.Percent {
			return a.Percent - b.Percent
		}
		return int(a.Units - b.Units)
	})
	return slices.Compact(out)
}

// notifyInputs is the reverse of Thresholds, for a stored plan edited.
func notifyInputs(ts []keyspace.QuotaThreshold) []NotifyInput {
	if len(ts) == 0 {
		return nil
	}
	out := make([]NotifyInput, len(ts))
	for i, t := range ts {
		out[i] = NotifyInput{QuotaThreshold: t}
	}
	return out
}

// notifyJSON is the column value: NULL for the default.
func notifyJSON(ts []keyspace.QuotaThreshold) []byte {
	if len(ts) == 0 {
		return nil
	}
	b, _ := json.Marshal(ts) // plain structs: never fails
	return b
}
