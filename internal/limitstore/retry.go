package limitstore

import (
	"context"
	"time"
)

// Retry runs publish up to three times, each attempt bounded by timeout,
// with short pauses between: at most about 3 × timeout + 100ms of a
// request, however long Redis stays silent. It is for writes to Redis made
// after a Postgres commit (a snapshot, an API key's revocation): the change
// is done by then, so the caller must not wait out go-redis's own retries.
// Every such publish must be idempotent (a snapshot's version, a key's
// hash), since an attempt that timed out after Redis took it is repeated.
func Retry(ctx context.Context, timeout time.Duration, publish func(context.Context) error) error {
	var err error
	wait := 20 * time.Millisecond
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(wait):
			}
			wait *= 4
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		err = publish(actx)
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}
