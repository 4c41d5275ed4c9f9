package program

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/examples/internal/connect"
	"github.com/leasehold/leasehold/fencing/fencingtest"
)

func TestMain(m *testing.M) { fencingtest.Main(m) }

// Every way a command line or a run can end maps to one exit status, and
// a bad command line reads as the program wrote it.
func TestExitStatus(t *testing.T) {
	var conn connect.Config
	parse := func(args []string, check func([]string) error) error {
		fs := Flags("prog", io.Discard, &conn, "127.0.0.1:2379", "usage: prog")
		fs.Int("n", 0, "a number")
		return Parse(fs, args, check)
	}
	none := func([]string) error { return nil }
	for _, tc := range []struct {
		name string
		err  error
		code int
		text string
	}{
		{"ok", parse(nil, none), 0, ""},
		{"help", parse([]string{"--help"}, none), 0, ""},
		{"unknown flag", parse([]string{"--nope"}, none), 2, "prog: flag provided but not defined: -nope\n"},
		{"bad value", parse([]string{"-n", "x"}, none), 2, "prog: invalid value"},
		{"check", parse([]string{"arg"}, func(args []string) error { return fmt.Errorf("unexpected argument %q", args[0]) }), 2,
			"prog: unexpected argument \"arg\"\n"},
		{"dial usage", fmt.Errorf("%w: TLS files", connect.ErrUsage), 2, "prog: bad command line: TLS files\n"},
		{"failure", errors.New("etcd unreachable"), 1, "prog: etcd unreachable\n"},
	} {
		var stderr bytes.Buffer
		if code := Exit("prog", &stderr, tc.err); code != tc.code || !strings.HasPrefix(stderr.String(), tc.text) {
			t.Errorf("%s: Exit(%v) = %d, printed %q; want %d, %q", tc.name, tc.err, code, stderr.String(), tc.code, tc.text)
		}
	}
	if err := parse([]string{"--help"}, none); !errors.Is(err, flag.ErrHelp) || errors.Is(err, connect.ErrUsage) {
		t.Errorf("--help: %v; want flag.ErrHelp, not a bad command line", err)
	}
}

// Connect does not dial after a failed parse: the parse error comes back
// as it was.
func TestConnectAfterParseError(t *testing.T) {
	parsed := errors.New("bad flag")
	cli, err := Connect(t.Context(), &connect.Config{}, parsed)
	if cli != nil || err != parsed {
		t.Fatalf("Connect = %v, %v; want nil, the parse error", cli, err)
	}
}
