package notify

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/internal/pgtest"
)

// received is one request a test receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver answers codes[i] to its i-th request (200 after the list) and
// keeps every request.
type receiver struct {
	mu    sync.Mutex
	got   []received
	codes []int
	srv   *httptest.Server
}

func newReceiver(t *testing.T, codes ...int) *receiver {
	r := &receiver{codes: codes}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		i := len(r.got)
		r.got = append(r.got, received{header: req.Header.Clone(), body: b})
		r.mu.Unlock()
		code := http.StatusOK
		if i < len(r.codes) {
			code = r.codes[i]
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "answer "+http.StatusText(code))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// bundle is a test's service and its running River worker.
type bundle struct {
	db  *pgxpool.Pool
	svc *Service
	log *logBuffer // everything the service and its worker logged
}

// testKey is the tests' WEBHOOK_SECRET_KEY.
var testKey = bytes.Repeat([]byte{7}, 32)

// logBuffer is a log capture safe for the worker's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func setup(t testing.TB, opts Options) bundle {
	t.Helper()
	db := pgtest.New(t)
	ctx := context.Background()
	// Every test starts with no endpoint: deliveries of another test's
	// endpoints would be sent to its receivers.
	if _, err := db.Exec(ctx, `TRUNCATE webhook_endpoints, webhook_events CASCADE`); err != nil {
		t.Fatal(err)
	}
	if opts.SecretKey == nil {
		opts.SecretKey = testKey
	}
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := NewService(db, log, opts)
	if err != nil {
		t.Fatal(err)
	}
	workers := river.NewWorkers()
	svc.Register(workers)
	client, err := jobs.NewWorkerClient(db, log, jobs.Config{Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	if err := client.Start(rctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = client.Stop(sctx)
		cancel()
	})
	return bundle{db: db, svc: svc, log: logs}
}

// emit writes events in a transaction of its own.
func (b bundle) emit(t *testing.T, evs ...Event) int {
	t.Helper()
	ctx := context.Background()
	var n int
	err := pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error {
		var err error
		n, err = b.svc.Emit(ctx, tx, evs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

type deliveryRow struct {
	Status   string
	Attempts int
	Code     *int
	Error    *string
}

func (b bundle) delivery(t *testing.T, endpointID string) deliveryRow {
	t.Helper()
	var d deliveryRow
	err := b.db.QueryRow(context.Background(), `SELECT status, attempts, last_code, last_error FROM webhook_deliveries WHERE endpoint_id = $1`, endpointID).
		Scan(&d.Status, &d.Attempts, &d.Code, &d.Error)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
