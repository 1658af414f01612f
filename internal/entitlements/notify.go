package entitlements

import (
	"encoding/json"
	"slices"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// notifyJSON is the column value: NULL for the default.
func notifyJSON(ts []keyspace.QuotaThreshold) []byte {
	if len(ts) == 0 {
		return nil
	}
	b, _ := json.Marshal(ts) // plain structs: never fails
	return b
}

// setNotify records meter's thresholds in the snapshot (none: the
// default).
func setNotify(snap *limiter.Snapshot, meter string, ts []keyspace.QuotaThreshold) {
	if len(ts) == 0 {
		delete(snap.Notify, meter)
		return
	}
	if snap.Notify == nil {
		snap.Notify = map[string][]keyspace.QuotaThreshold{}
	}
	snap.Notify[meter] = slices.Clone(ts)
}
