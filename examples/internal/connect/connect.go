// Package connect is how every example program reaches etcd: etcdctl's
// flags and ETCDCTL_* environment variables, a dial that either succeeds or
// fails within the dial timeout with an error naming each endpoint, and a
// logger on stderr.
//
// Flags win over the environment, as with etcdctl:
//
//	--endpoints     ETCDCTL_ENDPOINTS      comma-separated; http:// is assumed unless TLS is set
//	--cacert        ETCDCTL_CACERT         CA bundle that signed the servers' certificates
//	--cert, --key   ETCDCTL_CERT, _KEY     client certificate and key
//	--user          ETCDCTL_USER           name, or name:password
//	--password      ETCDCTL_PASSWORD
//	--dial-timeout  ETCDCTL_DIAL_TIMEOUT   e.g. 5s
package connect

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DefaultDialTimeout bounds the first contact with etcd when neither
// --dial-timeout nor ETCDCTL_DIAL_TIMEOUT says otherwise.
const DefaultDialTimeout = 5 * time.Second

// ErrUsage marks a configuration that cannot work, whatever the cluster
// says: programs exit 2 for it.
var ErrUsage = errors.New("bad command line")

// Config says how to reach etcd. Register fills it from flags and the
// environment.
type Config struct {
	Endpoints   string
	CACert      string
	Cert, Key   string
	User        string // name, or name:password
	Password    string
	DialTimeout time.Duration
	Verbose     bool

	envErr error // a malformed ETCDCTL_DIAL_TIMEOUT, reported by Validate
}

// Register adds the connection flags and -v to fs. A flag's default is its
// ETCDCTL_* variable when set, else defaultEndpoints for --endpoints.
func (c *Config) Register(fs *flag.FlagSet, defaultEndpoints string) {
	env := func(name, def string) string {
		if v, ok := os.LookupEnv("ETCDCTL_" + name); ok {
			return v
		}
		return def
	}
	timeout := DefaultDialTimeout
	if v := env("DIAL_TIMEOUT", ""); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			c.envErr = fmt.Errorf("%w: ETCDCTL_DIAL_TIMEOUT=%q: want a positive duration such as 5s", ErrUsage, v)
		} else {
			timeout = d
		}
	}
	fs.StringVar(&c.Endpoints, "endpoints", env("ENDPOINTS", defaultEndpoints), "comma-separated etcd endpoints (ETCDCTL_ENDPOINTS)")
	fs.StringVar(&c.CACert, "cacert", env("CACERT", ""), "CA bundle that verifies etcd's certificates (ETCDCTL_CACERT)")
	fs.StringVar(&c.Cert, "cert", env("CERT", ""), "client certificate for etcd (ETCDCTL_CERT)")
	fs.StringVar(&c.Key, "key", env("KEY", ""), "client key for etcd (ETCDCTL_KEY)")
	fs.StringVar(&c.User, "user", env("USER", ""), "etcd user, as name or name:password (ETCDCTL_USER)")
	fs.StringVar(&c.Password, "password", env("PASSWORD", ""), "etcd password (ETCDCTL_PASSWORD)")
	fs.DurationVar(&c.DialTimeout, "dial-timeout", timeout, "how long the first contact with etcd may take (ETCDCTL_DIAL_TIMEOUT)")
	fs.BoolVar(&c.Verbose, "v", false, "log debug detail too")
}

// Validate reports a configuration that cannot work, wrapping ErrUsage.
func (c *Config) Validate() error {
	switch {
	case c.envErr != nil:
		return c.envErr
	case len(c.endpoints()) == 0:
		return fmt.Errorf("%w: no endpoints: pass --endpoints or set ETCDCTL_ENDPOINTS", ErrUsage)
	case (c.Cert == "") != (c.Key == ""):
		return fmt.Errorf("%w: --cert and --key go together", ErrUsage)
	case c.DialTimeout <= 0:
		return fmt.Errorf("%w: --dial-timeout %v: want a positive duration", ErrUsage, c.DialTimeout)
	}
	for _, ep := range c.endpoints() {
		if u, err := url.Parse(ep); err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("%w: endpoint %q: want host:port, http://host:port or https://host:port", ErrUsage, ep)
		}
	}
	return nil
}

// endpoints returns the endpoints as URLs: a bare host:port gets http://,
// or https:// when any TLS flag is set (etcdctl does the same).
func (c *Config) endpoints() []string {
	var eps []string
	for _, ep := range strings.Split(c.Endpoints, ",") {
		ep = strings.TrimSpace(ep)
		switch {
		case ep == "":
			continue
		case !strings.Contains(ep, "://") && c.tlsWanted():
			ep = "https://" + ep
		case !strings.Contains(ep, "://"):
			ep = "http://" + ep
		}
		eps = append(eps, ep)
	}
	return eps
}

func (c *Config) tlsWanted() bool { return c.CACert != "" || c.Cert != "" }

func (c *Config) tls() (*tls.Config, error) {
	useTLS := c.tlsWanted()
	for _, ep := range c.endpoints() {
		useTLS = useTLS || strings.HasPrefix(ep, "https://")
	}
	if !useTLS {
		return nil, nil
	}
	if !c.tlsWanted() {
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil // the system's CAs
	}
	info := transport.TLSInfo{TrustedCAFile: c.CACert, CertFile: c.Cert, KeyFile: c.Key}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: TLS files: %v", ErrUsage, err)
	}
	return cfg, nil
}

func (c *Config) credentials() (user, password string) {
	user, password = c.User, c.Password
	if name, pw, ok := strings.Cut(c.User, ":"); ok && password == "" {
		user, password = name, pw
	}
	return user, password
}

// Dial connects to etcd and checks that a member answers, all within the
// dial timeout (or ctx, if it ends first). On failure it returns an error
// naming each endpoint and what went wrong with it: refused, timed out, a
// TLS handshake the server or this client refused, a bad password.
func (c *Config) Dial(ctx context.Context) (*clientv3.Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tlsCfg, err := c.tls()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.DialTimeout)
	defer cancel()
	eps := c.endpoints()
	// gRPC retries a refused connection or a failed handshake until the
	// deadline and then says only "context deadline exceeded": dial each
	// endpoint ourselves first, so the error says which one failed and why.
	live, err := probeAll(ctx, eps, tlsCfg)
	if err != nil {
		return nil, err
	}
	user, password := c.credentials()
	// New blocks only to log in (with --user), for at most DialTimeout: give
	// it what is left of the budget.
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps, TLS: tlsCfg, Username: user, Password: password,
		DialTimeout: max(time.Until(deadline(ctx)), time.Millisecond), Logger: zap.NewNop(),
		// Notice a dead connection (a partition) in seconds; etcd refuses
		// pings more often than every 5 s.
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", strings.Join(eps, ","), explain(err, ctx))
	}
	// A member that answers gRPC but not etcd (or not yet) shows here.
	if _, err := cli.Status(ctx, live); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd at %s did not answer: %w", live, explain(err, ctx))
	}
	return cli, nil
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// explain turns a deadline into what it means here.
func explain(err error, ctx context.Context) error {
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return fmt.Errorf("no answer within the dial timeout (%w)", err)
	}
	return err
}

// probeAll dials every endpoint at once and returns the first that
// completes a TCP (and TLS) handshake, or an error naming each failure.
func probeAll(ctx context.Context, eps []string, tlsCfg *tls.Config) (string, error) {
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() { errs[i] = probe(ctx, ep, tlsCfg) })
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			return eps[i], nil
		}
	}
	return "", fmt.Errorf("cannot reach etcd: %w", errors.Join(errs...))
}

// probe opens a connection to ep as gRPC would (TCP, TLS, the HTTP/2
// preface) and reads the server's first frame. A server that refuses our
// certificate says so only after the TLS handshake (TLS 1.3), and a TLS
// server spoken to in plain text just hangs up: both show here, with reasons.
func probe(ctx context.Context, ep string, tlsCfg *tls.Config) error {
	u, _ := url.Parse(ep) // Validate parsed it
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return fmt.Errorf("%s: %w", ep, timeoutText(err, ctx))
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if u.Scheme == "https" {
		cfg := &tls.Config{}
		if tlsCfg != nil {
			cfg = tlsCfg.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		cfg.NextProtos = []string{"h2"}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("%s: TLS handshake: %w", ep, timeoutText(err, ctx))
		}
		conn = tc
	}
	// The client preface, then an empty SETTINGS frame; the server's first
	// frame must be its SETTINGS (type 4).
	const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"
	if _, err := io.WriteString(conn, preface); err != nil {
		return fmt.Errorf("%s: %w", ep, timeoutText(err, ctx))
	}
	var frame [9]byte
	if _, err := io.ReadFull(conn, frame[:]); err != nil {
		if u.Scheme == "http" && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)) {
			return fmt.Errorf("%s: the server hung up: does it serve TLS? (use https:// and --cacert)", ep)
		}
		return fmt.Errorf("%s: %w", ep, timeoutText(err, ctx))
	}
	if frame[3] != 4 {
		return fmt.Errorf("%s: not an etcd (gRPC) server", ep)
	}
	return nil
}

func timeoutText(err error, ctx context.Context) error {
	if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("no answer within the dial timeout (%w)", err)
	}
	return err
}

// Logger returns a text logger on w: info and above, debug too with -v.
func (c *Config) Logger(w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	if c.Verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
