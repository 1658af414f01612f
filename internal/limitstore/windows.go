package limitstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter"
)

// WindowUse is what a plan window has counted by Redis's clock: the
// units in the current window (for a sliding window, the limiter's
// estimate: the previous window's count weighted by its overlap, plus the
// current one's) and how long until the current window ends.
type WindowUse struct {
	Window limiter.Window
	Used   int64
	Reset  time.Duration
}

// WindowUsage reads the tenant's plan windows' counters in one pipeline,
// with Redis's TIME (the clock the limiter counts by).
func (s *Store) WindowUsage(ctx context.Context, tenant string, ws []limiter.Window) ([]WindowUse, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	var now *redis.TimeCmd
	cmds := make([]*redis.SliceCmd, len(ws))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		for i, w := range ws {
			cmds[i] = p.HMGet(ctx, s.keys.PlanWindow(tenant, w.Name, w.Length, w.Kind == limiter.WindowFixed), "w", "c", "p")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("limitstore: reading windows of %q: %w", tenant, err)
	}
	nowMs := now.Val().UnixMilli()
	out := make([]WindowUse, 0, len(ws))
	for i, w := range ws {
		b := w.Length.Milliseconds()
		if b <= 0 {
			continue
		}
		idx, el := nowMs/b, nowMs%b
		v := cmds[i].Val()
		num := func(j int) float64 {
			if j >= len(v) {
				return 0
			}
			str, _ := v[j].(string)
			f, _ := strconv.ParseFloat(str, 64)
			return f
		}
		wi, cur, prev := int64(num(0)), num(1), num(2)
		if len(v) == 0 || v[0] == nil {
			wi = idx
		}
		u := WindowUse{Window: w, Reset: time.Duration(b-el) * time.Millisecond}
		switch {
		case w.Kind == limiter.WindowFixed:
			if wi == idx {
				u.Used = int64(cur)
			}
		default:
			switch {
			case wi == idx-1:
				prev, cur = cur, 0
			case wi < idx-1:
				prev, cur = 0, 0
			}
			u.Used = int64(math.Ceil(prev*(1-float64(el)/float64(b)) + cur)) // what the limiter counts against
		}
		out = append(out, u)
	}
	return out, nil
}
