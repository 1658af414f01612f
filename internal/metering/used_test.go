package metering

import "testing"

// Used is the larger of the durable figure and the live counter, a tie
// counting as the live one, and no counter means the durable figure.
func TestUsedIsTheLargerOfRedisAndPostgres(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		durable, live int64
		ok            bool
		want          int64
		source        string
	}{
		{40, 57, true, 57, SourceRedis},
		{30, 12, true, 30, SourcePostgres},
		{30, 30, true, 30, SourceRedis},
		{30, 99, false, 30, SourcePostgres},
		{0, 0, false, 0, SourcePostgres},
	} {
		if got, src := Used(c.durable, c.live, c.ok); got != c.want || src != c.source {
			t.Errorf("Used(%d, %d, %v) = %d, %s; want %d, %s", c.durable, c.live, c.ok, got, src, c.want, c.source)
		}
	}
}
