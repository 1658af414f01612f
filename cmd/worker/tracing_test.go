package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/internal/tracing"
	"github.com/tollgatehq/tollgate/internal/tracing/otlptest"
)

// TestRunExportsJobSpans runs the worker with an OTLP endpoint: a job is a
// span named by its kind, linked to the span that enqueued it (River's
// insert span, a child of the enqueuing request's).
func TestRunExportsJobSpans(t *testing.T) {
	col := otlptest.Start(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	e := workerEnv(t)
	e["OTEL_EXPORTER_OTLP_ENDPOINT"] = col.HTTP // http/protobuf, the default protocol
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, nil, testkit.Getenv(e), &stdout, &stderr) }()
	waitForLog(t, stderr.String, "worker started", exited)

	pool, err := pgxpool.New(ctx, e["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ins, err := jobs.NewInsertClient(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	enqueueCtx, enqueue := tracing.Tracer().Start(ctx, "test-enqueue")
	if _, err := ins.Insert(enqueueCtx, jobs.PruneArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	enqueue.End()

	insert := col.Wait(t, 20*time.Second, "river.insert_many under test-enqueue", func(s otlptest.Span) bool {
		return strings.HasPrefix(s.Name, "river.insert") && s.ParentSpanID == enqueue.SpanContext().SpanID().String()
	})
	// The worker's own periodic prune job may run too, linked to its own
	// insert: the one wanted is the job linked to the test's insert.
	work := col.Wait(t, 30*time.Second, "the job's work span, linked to its insert", func(s otlptest.Span) bool {
		return s.Name == "river.work/"+(jobs.PruneArgs{}).Kind() && slices.Contains(s.Links, insert.SpanID)
	})
	if work.Attrs["kind"] != (jobs.PruneArgs{}).Kind() || work.Resource["service.name"] != "tollgate-worker" {
		t.Fatalf("work span %+v: want a link to the insert span %s, its kind, service tollgate-worker", work, insert.SpanID)
	}
	cancel()
	if code := <-exited; code != exitOK {
		t.Fatalf("exit %d", code)
	}
}
