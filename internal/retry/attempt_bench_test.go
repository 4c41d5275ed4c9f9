package retry

import (
	"context"
	"testing"
)

// BenchmarkAttempt is the bound's own cost on an answered request, beside
// the request sent bare: send stands in for a gRPC call, which makes a
// child context and reads its Done. "bounded" is the bound of a Lock's
// enqueue and an Unlock's delete (life is the session's or the client's);
// "bounded-own-life" a wait's read, whose life is its ctx. ctx is
// Background: a caller's cancelable ctx costs a registration more.
func BenchmarkAttempt(b *testing.B) {
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
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
		{"bounded-own-life", func(lat *Latency) error { return Attempt(life, life, lat, 0, send) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var lat Latency
			b.ReportAllocs()
			for b.Loop() { // one goroutine: ns/op is CPU per attempt
				if err := bc.run(&lat); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
