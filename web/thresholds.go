package web

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// formatThresholds writes a quota's webhook thresholds as the plan form
// shows them: "50%, 80%, 5000 units"; none (the defaults) is "".
func formatThresholds(ts []keyspace.QuotaThreshold) string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		if t.Units > 0 {
			parts = append(parts, strconv.FormatInt(t.Units, 10)+" units")
		} else {
			parts = append(parts, strconv.Itoa(t.Percent)+"%")
		}
	}
	return strings.Join(parts, ", ")
}

// parseThresholds reads the plan form's notify field: comma-separated
// entries, each a percentage of the limit ("80%", or a bare "80" as in the
// API's "notify": [80]) or a number of units ("5000 units", "5000u").
// Empty is nil: the defaults. Only the shape is checked here; the ranges
// (1-100%, at most so many, no repeats) are the service's, and its errors
// come back named quotas[i].notify[k].
func parseThresholds(s string) ([]catalogue.NotifyInput, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []catalogue.NotifyInput
	for i, raw := range strings.Split(s, ",") {
		e := strings.ToLower(strings.TrimSpace(raw))
		var t keyspace.QuotaThreshold
		var err error
		switch {
		case e == "":
			return nil, fmt.Errorf("threshold %d is empty: write e.g. 80%%, 100%%, 5000 units", i+1)
		case strings.HasSuffix(e, "%"):
			t.Percent, err = strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(e, "%")))
		case strings.HasSuffix(e, "units"), strings.HasSuffix(e, "u"):
			num := strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(e, "units"), "u"))
			t.Units, err = strconv.ParseInt(num, 10, 64)
		default:
			t.Percent, err = strconv.Atoi(e)
		}
		if err != nil {
			return nil, errors.New("thresholds are percentages (80%) or units (5000 units), comma-separated; " +
				strconv.Quote(strings.TrimSpace(raw)) + " is neither")
		}
		out = append(out, catalogue.NotifyInput{QuotaThreshold: t})
	}
	return out, nil
}
