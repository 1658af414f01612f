package limiter

import "container/list"

// lru is a bounded least-recently-used map. It is not safe for concurrent
// use; its owner holds a lock.
type lru[K comparable, V any] struct {
	max   int
	ll    *list.List
	items map[K]*list.Element
}

type lruItem[K comparable, V any] struct {
	k K
	v V
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	if max < 1 {
		max = 1
	}
	return &lru[K, V]{max: max, ll: list.New(), items: make(map[K]*list.Element)}
}

func (c *lru[K, V]) get(k K) (V, bool) {
	if e, ok := c.items[k]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*lruItem[K, V]).v, true
	}
	var zero V
	return zero, false
}

// peek returns k's value without making it recent: safe under a read lock
// (it only reads the map).
func (c *lru[K, V]) peek(k K) (V, bool) {
	if e, ok := c.items[k]; ok {
		return e.Value.(*lruItem[K, V]).v, true
	}
	var zero V
	return zero, false
}

func (c *lru[K, V]) put(k K, v V) {
	if e, ok := c.items[k]; ok {
		e.Value.(*lruItem[K, V]).v = v
		c.ll.MoveToFront(e)
		return
	}
	c.items[k] = c.ll.PushFront(&lruItem[K, V]{k, v})
	for c.ll.Len() > c.max {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.items, last.Value.(*lruItem[K, V]).k)
	}
}

func (c *lru[K, V]) remove(k K) {
	if e, ok := c.items[k]; ok {
		c.ll.Remove(e)
		delete(c.items, k)
	}
}

func (c *lru[K, V]) clear() {
	c.ll.Init()
	clear(c.items)
}

func (c *lru[K, V]) len() int { return c.ll.Len() }
