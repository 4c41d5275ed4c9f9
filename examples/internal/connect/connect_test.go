package connect

import (
	"context"
	"errors"
	"flag"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/fencing/fencingtest"
)

func TestMain(m *testing.M) { fencingtest.Main(m) }

func parse(t *testing.T, args ...string) *Config {
	t.Helper()
	var c Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.Register(fs, "127.0.0.1:2379")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestDialTLS(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	ep := strings.TrimPrefix(c.Endpoints()[0], "https://")
	cli, err := parse(t, "--endpoints", ep, "--cacert", c.TLS.CA, "--cert", c.TLS.Cert, "--key", c.TLS.Key).Dial(t.Context())
	if err != nil {
		t.Fatalf("Dial with good certificates: %v", err)
	}
	defer cli.Close()
	if _, err := cli.Put(t.Context(), "k", "v"); err != nil {
		t.Fatalf("Put after Dial: %v", err)
	}
}

// Every way of not reaching etcd ends within the dial timeout with an error
// that names the endpoint and the reason.
func TestDialFailsClearly(t *testing.T) {
	c := fencingtest.SingleTLS(t)
	ep := c.Endpoints()[0]
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never speaks
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"wrong CA", []string{"--endpoints", ep, "--cacert", c.TLS.WrongCA, "--cert", c.TLS.Cert, "--key", c.TLS.Key},
			[]string{ep, "certificate signed by unknown authority"}},
		{"client certificate refused", []string{"--endpoints", ep, "--cacert", c.TLS.CA, "--cert", c.TLS.Untrusted.Cert, "--key", c.TLS.Untrusted.Key},
			[]string{ep, "unknown certificate authority"}},
		{"no client certificate", []string{"--endpoints", ep, "--cacert", c.TLS.CA}, []string{ep, "certificate required"}},
		{"plain http to a TLS server", []string{"--endpoints", strings.TrimPrefix(ep, "https://")}, []string{"http://", "TLS"}},
		{"refused", []string{"--endpoints", "127.0.0.1:1"}, []string{"127.0.0.1:1", "refused"}},
		{"silent", []string{"--endpoints", "https://" + silent.Addr().String(), "--cacert", c.TLS.CA},
			[]string{silent.Addr().String(), "dial timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := parse(t, append(tc.args, "--dial-timeout", "2s")...)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				cli, err := cfg.Dial(ctx)
				if err == nil {
					cli.Close()
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Dial did not return within 30 s with a 2 s dial timeout")
			}
			if err == nil {
				t.Fatal("Dial succeeded")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestEnvironmentAndFlags(t *testing.T) {
	t.Setenv("ETCDCTL_ENDPOINTS", "10.0.0.1:2379")
	t.Setenv("ETCDCTL_CACERT", "/env/ca.pem")
	t.Setenv("ETCDCTL_DIAL_TIMEOUT", "7s")
	t.Setenv("ETCDCTL_USER", "alice:secret")
	c := parse(t, "--endpoints", "a:1,b:2")
	if c.Endpoints != "a:1,b:2" || c.CACert != "/env/ca.pem" || c.DialTimeout != 7*time.Second {
		t.Fatalf("config %+v: want flags over environment", c)
	}
	if got := c.endpoints(); strings.Join(got, " ") != "https://a:1 https://b:2" {
		t.Fatalf("endpoints with a CA = %q; want https", got)
	}
	if u, p := c.credentials(); u != "alice" || p != "secret" {
		t.Fatalf("credentials = %q, %q", u, p)
	}
}

func TestBadConfigIsUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"--endpoints", ""},
		{"--cert", "c.pem"},
		{"--dial-timeout", "0s"},
		{"--endpoints", "ftp://x:1"},
		{"--cacert", "/does/not/exist.pem"},
	} {
		_, err := parse(t, args...).Dial(t.Context())
		if !errors.Is(err, ErrUsage) {
			t.Errorf("Dial with %q = %v; want ErrUsage", args, err)
		}
	}
	t.Setenv("ETCDCTL_DIAL_TIMEOUT", "soon")
	if err := parse(t).Validate(); !errors.Is(err, ErrUsage) {
		t.Errorf("ETCDCTL_DIAL_TIMEOUT=soon: %v; want ErrUsage", err)
	}
}
