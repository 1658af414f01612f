package catalogue

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// meterSet remembers which meters any plan defines, so that a request
// naming a meter no plan knows (a typo that would otherwise be counted as
// "unlimited" forever) can be refused without a query per request.
type meterSet struct {
	mu     sync.Mutex
	read   time.Time
	meters map[string]bool
}

// meterSetFresh is how old the set may be before it is read again; a miss
// re-reads it once it is older than meterSetMiss, so that a meter a new
// plan brings is known within a second, while a flood of made-up meters
// costs at most one query per second.
const (
	meterSetFresh = 30 * time.Second
	meterSetMiss  = time.Second
)

// MeterDefined reports whether some plan has a quota on meter.
func (s *Service) MeterDefined(ctx context.Context, meter string) (bool, error) {
	m := &s.meters
	m.mu.Lock()
	defer m.mu.Unlock()
	age := time.Since(m.read)
	if m.meters != nil && age < meterSetFresh && (m.meters[meter] || age < meterSetMiss) {
		return m.meters[meter], nil
	}
	rows, err := s.db.Query(ctx, `SELECT DISTINCT meter FROM plan_quotas`)
	if err != nil {
		return false, fmt.Errorf("catalogue: meters: %w", err)
	}
	defer rows.Close()
	set := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return false, fmt.Errorf("catalogue: meters: %w", err)
		}
		set[name] = true
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("catalogue: meters: %w", err)
	}
	m.meters, m.read = set, time.Now()
	return set[meter], nil
}
