package redisfence_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/fencing/redisfence"
	"github.com/leasehold/leasehold/internal/testbed/redistest"
	"github.com/redis/go-redis/v9"
)

// replyCutter forwards connections to a Redis and, for the first connection
// that sends a command after armed is set, delivers the command but closes
// the connection instead of its reply: a lost reply, after the server wrote.
type replyCutter struct {
	ln    net.Listener
	to    string
	armed atomic.Bool
	wg    sync.WaitGroup
}

func newReplyCutter(t *testing.T, to string) *replyCutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyCutter{ln: ln, to: to}
	p.wg.Go(p.serve)
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *replyCutter) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.relay(c) })
	}
}

func (p *replyCutter) relay(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.to)
	if err != nil {
		return
	}
	p.wg.Go(func() {
		io.Copy(c, &cutOnce{Reader: s, p: p, c: c})
		c.Close() // the server's side ended: end the client's
	})
	io.Copy(s, c)
	s.Close() // the client's side ended: end the server's, and the copy above
}

// cutOnce passes the server's bytes on, except the first reply read while
// the cutter is armed: it disarms it and closes the client's connection.
type cutOnce struct {
	io.Reader
	p *replyCutter
	c net.Conn
}

func (r *cutOnce) Read(b []byte) (int, error) {
	n, err := r.Reader.Read(b)
	if n > 0 && r.p.armed.CompareAndSwap(true, false) {
		r.c.Close()
		return 0, io.EOF
	}
	return n, err
}

// A fenced write whose reply is lost was applied once by Redis. A client
// that sends it again (go-redis's default MaxRetries) applies it a second
// time, under the same token, which the fence admits: the Client doc's
// warning. With MaxRetries -1 the caller gets the error (the outcome is
// unknown) and the write stays single.
func TestLostReplyResentAppliesTwice(t *testing.T) {
	srv := redistest.Shared(t)
	for _, tc := range []struct {
		retries int
		want    int64
	}{{-1, 1}, {0, 2}} { // 0: go-redis's default, three retries
		cut := newReplyCutter(t, srv.Addr)
		rdb := redis.NewClient(&redis.Options{Addr: cut.ln.Addr().String(), DisableIdentity: true, MaxRetries: tc.retries})
		fence, err := redisfence.New(redistest.GoRedis{Client: rdb})
		if err != nil {
			t.Fatal(err)
		}
		ctx, name := ctxFor(t), unique(t)
		if _, err := fence.Do(ctx, tok(name, 1)); err != nil { // loads the script
			t.Fatal(err)
		}
		cut.armed.Store(true)
		_, err = fence.Do(ctx, tok(name, 1), redisfence.RPush("{"+name+"}:log", "once"))
		n, lerr := rdb.LLen(ctx, "{"+name+"}:log").Result()
		t.Logf("MaxRetries %d: Do = %v; the list holds %d", tc.retries, err, n)
		if lerr != nil || n != tc.want {
			t.Errorf("MaxRetries %d: the list holds %d (%v); want %d", tc.retries, n, lerr, tc.want)
		}
		if tc.retries == -1 && (err == nil || errors.Is(err, redis.Nil)) {
			t.Errorf("MaxRetries -1: Do = %v; want the lost reply's error", err)
		}
		rdb.Close()
	}
}
