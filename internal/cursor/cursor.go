// Package cursor encodes the keyset-pagination cursors of the admin lists
// (tenants, Stripe events): the (time, id) of the last row of a page,
// opaque to clients.
package cursor

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// Encode is base64url of "<unix micros>|<id>". Micros, as Postgres keeps
// timestamps, so the next page starts exactly after the row.
func Encode(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + "|" + id))
}

// Decode reverses Encode; ok is false for anything Encode did not make
// (the caller answers 400 naming the cursor).
func Decode(c string) (at time.Time, id string, ok bool) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", false
	}
	us, id, found := strings.Cut(string(raw), "|")
	n, err := strconv.ParseInt(us, 10, 64)
	if !found || err != nil || id == "" {
		return time.Time{}, "", false
	}
	return time.UnixMicro(n).UTC(), id, true
}
