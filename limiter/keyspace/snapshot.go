package keyspace

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// putSnapshotScript writes a snapshot unless a newer version is stored
// (writes may arrive out of order), and announces it.
var putSnapshotScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, obj = pcall(cjson.decode, cur)
  if ok and type(obj) == 'table' and tonumber(obj['version']) and tonumber(obj['version']) > tonumber(ARGV[2]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('DEL', KEYS[2]) -- the limits hash: the next limiter to read the snapshot writes it
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
`)

// PutSnapshot writes the tenant's snapshot (raw: the JSON of a
// limiter.Snapshot of version) to keep for ttl (at least a second), drops
// its limits hash and announces it on Invalidations, in one script, the way
// every writer of snapshots must: the limiters' near-caches follow the
// announcement. A write older than the stored version is ignored (written
// false): writes may arrive out of order.
func (k Keys) PutSnapshot(ctx context.Context, rdb redis.Scripter, tenant string, raw []byte, version int64, ttl time.Duration) (written bool, err error) {
	secs := max(int64(ttl/time.Second), 1)
	n, err := putSnapshotScript.Run(ctx, rdb, []string{k.Snapshot(tenant), k.Limits(tenant)},
		raw, version, secs, k.Invalidations(), Invalidation(tenant, version)).Int64()
	return n == 1, err
}
