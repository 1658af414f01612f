package keyspace

// QuotaThreshold is a line in a quota whose crossing Tollgate's flush
// reports (limiter.Snapshot.Notify): Percent of its limit, or Units
// (exactly one is set). Only the server reads it; decisions never do.
type QuotaThreshold struct {
	Percent int   `json:"percent,omitempty"`
	Units   int64 `json:"units,omitempty"`
}
