// Package program is the skeleton every example program shares: a context
// that ends at the first SIGINT or SIGTERM, a command line with etcdctl's
// connection flags, and one mapping from what went wrong to the exit status
// (0 after --help, 2 for a bad command line, 1 for any other failure).
package program

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/examples/internal/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Main runs run with the process's arguments and streams and a context that
// ends at the first SIGINT or SIGTERM, then exits with the status run returns.
func Main(run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Flags returns the flag set of the program name: errors and --help go to
// stderr, --help prints usage's lines before the flags, and conn's flags are
// registered with defaultEndpoints (see connect.Config.Register).
func Flags(name string, stderr io.Writer, conn *connect.Config, defaultEndpoints string, usage ...string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	conn.Register(fs, defaultEndpoints)
	fs.Usage = func() {
		for _, line := range usage {
			fmt.Fprintln(stderr, line)
		}
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args into fs, then hands check the positional arguments.
// Whatever either reports, except flag.ErrHelp, is a bad command line: it
// matches connect.ErrUsage, with its text unchanged.
func Parse(fs *flag.FlagSet, args []string, check func(args []string) error) error {
	err := fs.Parse(args)
	if err == nil {
		err = check(fs.Args())
	}
	if err == nil || errors.Is(err, flag.ErrHelp) || errors.Is(err, connect.ErrUsage) {
		return err
	}
	return usageError{err}
}

// Connect dials etcd as conn says, once the command line has parsed: a
// parse error is returned as it is, with no dial.
func Connect(ctx context.Context, conn *connect.Config, parsed error) (*clientv3.Client, error) {
	if parsed != nil {
		return nil, parsed
	}
	return conn.Dial(ctx)
}

// Exit prints err after the program's name on stderr and returns the exit
// status it calls for: 0 for nil and for --help (which the flag set has
// printed), 2 for a bad command line (errors.Is connect.ErrUsage), 1 for
// anything else.
func Exit(name string, stderr io.Writer, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	if errors.Is(err, connect.ErrUsage) {
		return 2
	}
	return 1
}

// usageError marks a command line that cannot work without changing how it
// reads: the flag package's and the programs' own messages stay as written.
type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == connect.ErrUsage }
