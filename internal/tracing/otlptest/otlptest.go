// Package otlptest is an in-process OTLP trace collector for tests: it
// accepts exports over gRPC and over HTTP (protobuf), as a real collector
// does, and lets a test wait for spans by name.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span with its resource's and its own attributes
// flattened to strings.
type Span struct {
	Name         string
	TraceID      string // hex
	SpanID       string // hex
	ParentSpanID string // hex, "" for a root
	Kind         tracepb.Span_SpanKind
	Attrs        map[string]string
	Resource     map[string]string
	Links        []string // linked span ids, hex
	StatusError  bool
}

// Collector receives spans until the test ends.
type Collector struct {
	coltracepb.UnimplementedTraceServiceServer
	// GRPC is host:port of the gRPC receiver; HTTP the base URL of the
	// HTTP one (POST /v1/traces).
	GRPC, HTTP string

	mu    sync.Mutex
	spans []Span
}

// Start runs a collector on loopback ports.
func Start(t testing.TB) *Collector {
	t.Helper()
	c := &Collector{}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, c)
	go func() { _ = g.Serve(gl) }()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.add(&req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	t.Cleanup(func() { g.Stop(); hs.Close() })
	c.GRPC, c.HTTP = gl.Addr().String(), "http://"+hl.Addr().String()
	return c
}

// Export is the gRPC receiver.
func (c *Collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *Collector) add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Kind: s.GetKind(), Attrs: attrs(s.GetAttributes()), Resource: res,
					StatusError: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR}
				if p := s.GetParentSpanId(); len(p) > 0 {
					sp.ParentSpanID = hex.EncodeToString(p)
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetSpanId()))
				}
				c.spans = append(c.spans, sp)
			}
		}
	}
}

// Spans returns what was received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Wait polls until a received span satisfies match, for up to within.
func (c *Collector) Wait(t testing.TB, within time.Duration, what string, match func(Span) bool) Span {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, s := range c.Spans() {
			if match(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range c.Spans() {
				names = append(names, s.Name)
			}
			t.Fatalf("no span %s within %s; received %d: %v", what, within, len(names), names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			if x.BoolValue {
				out[kv.GetKey()] = "true"
			} else {
				out[kv.GetKey()] = "false"
			}
		default:
			out[kv.GetKey()] = v.String()
		}
	}
	return out
}
