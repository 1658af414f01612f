package credentials

import (
	"context"
	"encoding/hex"
	"time"
)

// A known key in use is read again from Postgres in the background once
// half of KeyCacheTTL has passed, so that its cached entry is renewed
// before it expires and no request waits for the lookup. Without it every
// key in use cost one request a Postgres round trip every KeyCacheTTL (at
// 2,000 keys, 67 a second, each a request held; side by side the round
// after the 30 s TTL ran ~20% below the one before). The bound of
// KeyCacheTTL holds: an entry is never served past its expiry, which only
// a Postgres read begun within the last KeyCacheTTL renews. A key nobody
// uses is not read again and expires as before.

const (
	refreshQueue = 4096 // hashes waiting to be read again; more are left to expire
	refreshBatch = 512  // hashes read in one query
)

// knownEntry is the cache entry of a key Postgres found at now.
func (s *Service) knownEntry(info KeyInfo, now time.Time) keyEntry {
	return keyEntry{info: info, ok: true, expires: now.Add(s.opts.KeyCacheTTL), refreshAt: now.Add(s.opts.KeyCacheTTL / 2)}
}

// askRefresh queues sum to be read again; a full queue leaves the entry to
// expire (its next use then reads Postgres as before).
func (s *Service) askRefresh(sum []byte) {
	select {
	case s.refreshQ <- sum:
	default:
	}
}

// runKeyRefresh reads the queued keys again, a batch per query, until ctx
// ends.
func (s *Service) runKeyRefresh(ctx context.Context) {
	batch := make([][]byte, 0, refreshBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case sum := <-s.refreshQ:
			batch = append(batch[:0], sum)
		}
	more:
		for len(batch) < refreshBatch {
			select {
			case sum := <-s.refreshQ:
				batch = append(batch, sum)
			default:
				break more
			}
		}
		s.refreshKeys(ctx, batch)
	}
}

// refreshKeys reads the keys of sums from Postgres and caches the answers:
// a key no longer there (or revoked) becomes unknown. A revocation or a
// lost subscription meanwhile leaves the cache as it is (put's epoch).
func (s *Service) refreshKeys(ctx context.Context, sums [][]byte) {
	epoch := s.keys.epochNow()
	now := s.opts.Now()
	rows, err := s.db.Query(ctx, `SELECT hash, id::text, tenant_id::text FROM api_keys WHERE hash = ANY($1) AND revoked_at IS NULL`, sums)
	if err != nil {
		s.log.WarnContext(ctx, "api key refresh failed; the keys are read again on use after they expire", "keys", len(sums), "err", err)
		return
	}
	found := make(map[string]KeyInfo, len(sums))
	for rows.Next() {
		var (
			hash []byte
			info KeyInfo
		)
		if err := rows.Scan(&hash, &info.KeyID, &info.TenantID); err != nil {
			rows.Close()
			s.log.WarnContext(ctx, "api key refresh failed", "err", err)
			return
		}
		found[hex.EncodeToString(hash)] = info
	}
	if err := rows.Err(); err != nil {
		s.log.WarnContext(ctx, "api key refresh failed", "err", err)
		return
	}
	for _, sum := range sums {
		h := hex.EncodeToString(sum)
		if info, ok := found[h]; ok {
			s.keys.put(h, s.knownEntry(info, now), epoch)
		} else {
			s.keys.put(h, keyEntry{expires: now.Add(s.opts.NegativeCacheTTL)}, epoch)
		}
	}
	s.refreshed.Add(int64(len(sums)))
}
