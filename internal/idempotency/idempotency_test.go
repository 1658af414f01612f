package idempotency_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/idempotency"
	"github.com/tollgatehq/tollgate/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestBeginFinishReplayMismatchAbandonPrune(t *testing.T) {
	ctx := t.Context()
	s := idempotency.New(pgtest.New(t))
	h := idempotency.Hash("POST", "/admin/v1/tenants", []byte(`{"name":"A"}`))
	if a, err := s.Begin(ctx, "admin", "k1", h); a != nil || err != nil {
		t.Fatalf("first Begin: %v %v", a, err)
	}
	if _, err := s.Begin(ctx, "admin", "k1", h); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("Begin while in progress: %v", err)
	}
	// Another actor's key of the same name is its own.
	if a, err := s.Begin(ctx, "ops", "k1", h); a != nil || err != nil {
		t.Fatalf("another scope: %v %v", a, err)
	}
	if err := s.Finish(ctx, "admin", "k1", idempotency.Answer{Status: 201, ContentType: "application/json", Body: []byte(`{"id":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	a, err := s.Begin(ctx, "admin", "k1", h)
	if err != nil || a == nil || a.Status != 201 || string(a.Body) != `{"id":"x"}` {
		t.Fatalf("replay: %+v %v", a, err)
	}
	if _, err := s.Begin(ctx, "admin", "k1", idempotency.Hash("POST", "/admin/v1/tenants", []byte(`{"name":"B"}`))); !errors.Is(err, idempotency.ErrMismatch) {
		t.Fatalf("another body: %v", err)
	}
	// An abandoned claim (a 5xx) runs again.
	if err := s.Abandon(ctx, "ops", "k1"); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Begin(ctx, "ops", "k1", h); a != nil || err != nil {
		t.Fatalf("after Abandon: %v %v", a, err)
	}
	if n, err := s.Prune(ctx, time.Now().Add(time.Minute)); err != nil || n != 2 {
		t.Fatalf("Prune: %d %v, want 2", n, err)
	}
}
