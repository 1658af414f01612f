package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Every rule runs with its own cutoff, and one failing rule neither stops
// the others nor goes unreported (River retries the job).
func TestRetentionWorkerRunsEveryRule(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	got := map[string]time.Time{}
	rule := func(name string, keep time.Duration, err error) Retention {
		return Retention{Name: name, Keep: keep, Prune: func(_ context.Context, before time.Time) (int64, error) {
			got[name] = before
			return 1, err
		}}
	}
	w := &RetentionWorker{Now: func() time.Time { return now }, Rules: []Retention{
		rule("a", time.Hour, nil),
		rule("b", 24*time.Hour, errors.New("boom")),
		rule("c", 90*24*time.Hour, nil),
	}}
	err := w.Work(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "retention of b: boom") {
		t.Fatalf("err = %v, want the failing rule named", err)
	}
	for name, keep := range map[string]time.Duration{"a": time.Hour, "b": 24 * time.Hour, "c": 90 * 24 * time.Hour} {
		if want := now.Add(-keep); !got[name].Equal(want) {
			t.Errorf("rule %s pruned before %v, want %v", name, got[name], want)
		}
	}
}
