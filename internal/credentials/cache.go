package credentials

import (
	"sync"
	"time"
)

// keyCache maps SHA-256 hashes of API keys to what they authenticate.
type keyCache struct {
	mu    sync.Mutex
	live  bool
	epoch uint64 // bumped by every revocation and every loss of the subscription
	m     map[string]keyEntry
	// lastUsed remembers when this instance last wrote last_used_at per key.
	lastUsed map[string]time.Time
}

type keyEntry struct {
	info    KeyInfo
	ok      bool
	expires time.Time
	// refreshAt (a known key's) is when Authenticate asks Run to read the
	// key again ahead of expires; refreshing once it has asked.
	refreshAt  time.Time
	refreshing bool
}

// maxCachedKeys bounds the cache against floods of bogus keys.
const maxCachedKeys = 100_000

func newKeyCache() *keyCache {
	return &keyCache{m: map[string]keyEntry{}, lastUsed: map[string]time.Time{}}
}

func (c *keyCache) setLive(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live && !live {
		c.m = map[string]keyEntry{}
		c.epoch++
	}
	c.live = live
}

func (c *keyCache) isLive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// get returns the cached answer and the epoch a caller must present to put.
// refresh is true (once per entry) when a known key is past its refreshAt:
// the caller then asks for it to be read again.
func (c *keyCache) get(hash string, now time.Time) (e keyEntry, ok bool, epoch uint64, refresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live {
		return keyEntry{}, false, c.epoch, false
	}
	e, ok = c.m[hash]
	if ok && now.After(e.expires) {
		delete(c.m, hash)
		ok = false
	}
	if ok && e.ok && !e.refreshing && !e.refreshAt.IsZero() && now.After(e.refreshAt) {
		e.refreshing = true
		c.m[hash] = e
		refresh = true
	}
	return e, ok, c.epoch, refresh
}

// epochNow is the epoch a reader of Postgres must present to put.
func (c *keyCache) epochNow() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// put caches an answer read from Postgres unless a revocation (or a lost
// subscription) happened since the read began: then the answer may be stale.
func (c *keyCache) put(hash string, e keyEntry, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live || epoch != c.epoch {
		return
	}
	if len(c.m) >= maxCachedKeys {
		c.m = map[string]keyEntry{}
	}
	c.m[hash] = e
}

func (c *keyCache) revoke(hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, hash)
	c.epoch++
}

// touch reports whether last_used_at of key is due for a write, and marks it
// written.
func (c *keyCache) touch(keyID string, now time.Time, every time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.lastUsed[keyID]; ok && now.Sub(t) < every {
		return false
	}
	if len(c.lastUsed) >= maxCachedKeys {
		c.lastUsed = map[string]time.Time{}
	}
	c.lastUsed[keyID] = now
	return true
}
