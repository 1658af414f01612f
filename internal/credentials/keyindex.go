package credentials

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"
)

// keyIndex knows, without asking Postgres, whether a key hash may belong to
// an active API key: it holds the first 8 bytes of the hash of every active
// key. It is loaded from Postgres each time the revocation subscription is
// (re)established and kept current by the same channel ("+<hash>" when a
// key is issued, "<hash>" when one is revoked), so while it is live a hash
// it lacks is certainly no active key. Authenticate uses it to turn away a
// flood of made-up keys from an address that has used up its failures
// without a database query, while a real key from the same address still
// gets in.
//
// Eight bytes per key (about 40 with the map's overhead): a million active
// keys take some 40 MB; a collision only costs one database lookup.
type keyIndex struct {
	mu   sync.RWMutex
	live bool
	m    map[uint64]struct{}
}

func indexID(hash []byte) uint64 { return binary.BigEndian.Uint64(hash[:8]) }

func indexIDHex(h string) (uint64, bool) {
	if len(h) < 16 {
		return 0, false
	}
	b, err := hex.DecodeString(h[:16])
	if err != nil {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}

// load reads every active key's hash prefix and makes the index live.
func (s *Service) loadKeyIndex(ctx context.Context) error {
	rows, err := s.db.Query(ctx, `SELECT substring(hash FROM 1 FOR 8) FROM api_keys WHERE revoked_at IS NULL`)
	if err != nil {
		return fmt.Errorf("credentials: load key index: %w", err)
	}
	defer rows.Close()
	m := map[uint64]struct{}{}
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return fmt.Errorf("credentials: load key index: %w", err)
		}
		if len(b) == 8 {
			m[indexID(b)] = struct{}{}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("credentials: load key index: %w", err)
	}
	s.index.mu.Lock()
	// Keys issued or revoked while the query ran arrive as messages after
	// it (the subscription was confirmed first), so replacing is safe.
	s.index.m, s.index.live = m, true
	s.index.mu.Unlock()
	return nil
}

func (x *keyIndex) setDown() {
	x.mu.Lock()
	x.live, x.m = false, nil
	x.mu.Unlock()
}

func (x *keyIndex) add(id uint64) {
	x.mu.Lock()
	if x.m != nil {
		x.m[id] = struct{}{}
	}
	x.mu.Unlock()
}

func (x *keyIndex) remove(id uint64) {
	x.mu.Lock()
	delete(x.m, id)
	x.mu.Unlock()
}

// known answers (maybe an active key, index live).
func (x *keyIndex) known(hash []byte) (bool, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if !x.live {
		return true, false
	}
	_, ok := x.m[indexID(hash)]
	return ok, true
}

// KeyIndexLive reports whether unknown keys can be told apart without
// Postgres (tests poll it).
func (s *Service) KeyIndexLive() bool {
	s.index.mu.RLock()
	defer s.index.mu.RUnlock()
	return s.index.live
}
