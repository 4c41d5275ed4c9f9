// Package redistest starts a real Redis server for a test binary: one
// server per binary (Shared), or one of a test's own (Start), on a free
// loopback port, from Debian's packaged redis-server (`apt-get install -y
// redis-server`). Nothing persists: no RDB snapshot, no AOF. The server dies
// with the test binary, even one that is killed (on Linux, by a
// parent-death signal). Tests only.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing/fencingtest"
	"github.com/leasehold/leasehold/internal/testbed/kit"
	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds the wait for a started server to answer PING.
	readyTimeout = 20 * time.Second
	// pollInterval is how often that wait tries.
	pollInterval = 20 * time.Millisecond
	// stopTimeout bounds the wait for the server to exit after SIGTERM,
	// and then after SIGKILL.
	stopTimeout = 10 * time.Second
	// portAttempts is how many free ports a start tries: another process
	// can take one between our choosing it and redis-server binding it.
	portAttempts = 3
)

// installHint says how to get the server.
const installHint = "install it with `apt-get install -y redis-server`"

// errNotInstalled is the error of a start without a redis-server binary.
var errNotInstalled = errors.New("redistest: redis-server is not installed")

// Server is one redis-server process. Addr ("127.0.0.1:PORT") takes
// connections without a password.
type Server struct {
	Addr string
	Dir  string // its working directory, with redis.log

	cmd      *exec.Cmd
	exited   chan struct{}
	stopOnce sync.Once
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the test binary's server, starting it on first use; every
// later call returns the same one, and fencingtest.Main stops it after the
// tests. Without redis-server it calls t.Skip saying how to install it, or,
// when the environment has CI=true, t.Fatal: in CI a missing server is a
// failure, not a skip.
func Shared(t testing.TB) *Server {
	t.Helper()
	if _, err := SharedAddr(); err != nil {
		skipOrFatal(t, err)
	}
	return shared.srv
}

// Start starts a server of t's own, with extra redis-server arguments
// (such as "--cluster-enabled", "yes"); t.Cleanup stops it. A missing
// binary is handled as in Shared.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := start(args)
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(s.Stop)
	return s
}

// SharedAddr returns the address of the test binary's server, as Shared
// starts it, for code without a testing.TB (an Example): an error instead
// of a skip.
func SharedAddr() (string, error) {
	shared.once.Do(func() {
		shared.srv, shared.err = start(nil)
		if shared.err == nil {
			fencingtest.AtExit(shared.srv.Stop)
		}
	})
	if shared.err != nil {
		return "", shared.err
	}
	return shared.srv.Addr, nil
}

func skipOrFatal(t testing.TB, err error) {
	t.Helper()
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	switch {
	case !errors.Is(err, errNotInstalled):
		t.Fatal(err)
	case ci:
		t.Fatalf("%v (CI is set: a missing Redis is a failure, not a skip)", err)
	default:
		t.Skip(err)
	}
}

// Bin returns the path of redis-server, or an error saying how to install it.
func Bin() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server", nil
	}
	return "", fmt.Errorf("%w; %s", errNotInstalled, installHint)
}

func start(extra []string) (*Server, error) {
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	for attempt := 1; ; attempt++ {
		addr, err := kit.FreeAddr()
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: %w", err)
		}
		s, err := launch(bin, dir, addr, extra)
		if err == nil {
			return s, nil
		}
		if attempt == portAttempts {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// launch runs redis-server on addr and waits until it answers PING as the
// server of this directory (another process may hold the port).
func launch(bin, dir, addr string, extra []string) (*Server, error) {
	_, port, _ := net.SplitHostPort(addr)
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", "redis.log",
		"--cluster-config-file", "nodes-" + port + ".conf"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	kit.SetDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redistest: start %s: %w", bin, err)
	}
	s := &Server{Addr: addr, Dir: dir, cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(readyTimeout)
	for {
		err := s.ping(dir)
		if err == nil {
			return s, nil
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, fmt.Errorf("redistest: redis-server on %s exited before answering (%v):\n%s", addr, err, log)
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("redistest: redis-server on %s did not answer within %v: %v", addr, readyTimeout, err)
		}
	}
}

// ping asks the server at s.Addr for its working directory, which must be
// dir: a PING alone would take another server on the port for ours.
func (s *Server) ping(dir string) error {
	reply, err := s.Command("CONFIG", "GET", "dir")
	if err != nil {
		return err
	}
	if !strings.Contains(reply, dir) {
		return fmt.Errorf("the server on %s is not ours: CONFIG GET dir = %q", s.Addr, reply)
	}
	return nil
}

// Command sends one command on a new connection, with a deadline, and
// returns the reply's raw text (RESP, lines joined by "\n"): enough for the
// bed's own checks and an operator's commands in tests (FLUSHALL, CONFIG,
// CLUSTER), without a client library.
func (s *Server) Command(args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", s.Addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

// readReply reads one RESP2 reply, nested arrays included.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return line[1:], nil
}

// Stop ends the server (SIGTERM, then SIGKILL after stopTimeout), waits
// for it to exit and removes its directory. It is safe to call twice.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(stopTimeout):
			s.kill()
		}
		os.RemoveAll(s.Dir)
	})
}

func (s *Server) kill() {
	s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
	}
}

// GoRedis adapts a go-redis client to redisfence.Client, for the project's
// tests. Make the client with MaxRetries -1: a client that resends a write
// after a lost reply can apply a fenced write twice.
type GoRedis struct{ *redis.Client }

// Do sends args as one command.
func (c GoRedis) Do(ctx context.Context, args ...string) (any, error) {
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	return c.Client.Do(ctx, a...).Result()
}
