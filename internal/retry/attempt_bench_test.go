package retry

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/internal/admit"
)

// BenchmarkAttempt is the bound's own cost on an answered request, beside
// the request sent bare: send stands in for a gRPC call, which makes a
// child context and reads its Done. "bounded" is the bound of a Lock's
// enqueue under Background and of an Unlock's delete (a ctx that never
// ends; life is the session's or the client's): a view of ctx joining a
// shared bound. "bounded-caller-ctx" is a Lock's enqueue under a caller's
// cancelable ctx; "bounded-own-life" a wait's read, whose life is its ctx;
// "bounded-limited" is "bounded" taking a place among a session's requests
// in flight (SetLimit), as every attempt of a session does.
func BenchmarkAttempt(b *testing.B) {
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
	caller, cancelCaller := context.WithCancel(context.Background())
	defer cancelCaller()
	send := func(ctx context.Context) error {
		c, cancel := context.WithCancel(ctx)
		_ = c.Done()
		cancel()
		return nil
	}
	for _, bc := range []struct {
		name string
		run  func(lat *Latency) error
	}{
		{"bare", func(*Latency) error { return send(context.Background()) }},
		{"bounded", func(lat *Latency) error { return Attempt(context.Background(), life, lat, 0, send) }},
		{"bounded-caller-ctx", func(lat *Latency) error { return Attempt(caller, life, lat, 0, send) }},
		{"bounded-own-life", func(lat *Latency) error { return Attempt(life, life, lat, 0, send) }},
		{"bounded-limited", func(lat *Latency) error { return Attempt(context.Background(), life, lat, 0, send) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var lat Latency
			if bc.name == "bounded-limited" {
				lat.Places = admit.New(512)
			}
			b.ReportAllocs()
			for b.Loop() { // one goroutine: ns/op is CPU per attempt
				if err := bc.run(&lat); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
