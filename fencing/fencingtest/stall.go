package fencingtest

import (
	"context"
	"path"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// stall holds the messages a client sends on its LeaseKeepAlive streams
// while it is held; the zero value lets them through.
type stall struct {
	mu   sync.Mutex
	open chan struct{} // nil: not held; closed by release
}

func (s *stall) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = make(chan struct{})
	}
}

func (s *stall) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open != nil {
		close(s.open)
		s.open = nil
	}
}

// wait returns once the stall is released, or with ctx's error.
func (s *stall) wait(ctx context.Context) error {
	s.mu.Lock()
	open := s.open
	s.mu.Unlock()
	if open == nil {
		return nil
	}
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// option puts the stall in a client's lease renewal streams.
func (s *stall) option() ClientOption {
	return func(cfg *clientv3.Config) {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainStreamInterceptor(s.intercept))
	}
}

func (s *stall) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || path.Base(method) != "LeaseKeepAlive" {
		return cs, err
	}
	return &stalledStream{ClientStream: cs, stall: s}, nil
}

// stalledStream is a renewal stream whose sends wait out the stall: the
// renewal is late, not lost, as in a paused process.
type stalledStream struct {
	grpc.ClientStream
	stall *stall
}

func (s *stalledStream) SendMsg(m any) error {
	if err := s.stall.wait(s.Context()); err != nil {
		return err
	}
	return s.ClientStream.SendMsg(m)
}
