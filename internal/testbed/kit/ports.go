// Package kit is the test support that fencingtest and the project's test bed
// (internal/testbed/etcdtest) share: free ports, subprocesses that die with
// the test binary, a cluster's TLS certificates, and what fencingtest lends
// the project's own tests without a name in its public API (Lend). Tests
// only.
package kit

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreeAddr returns a free port of 127.0.0.1, for a server a test starts.
// Where the kernel says which ports it gives outgoing connections (Linux),
// the port lies below them: a stopped member's port, free for the moment
// before its ports are held (pause), could otherwise go to any client's
// connect, and its Restart would fail with "address already in use" (an
// hour's soak did, in a process making connections all the time).
func FreeAddr() (string, error) {
	if low := ephemeralLow(); low > 1025 {
		floor := max(1024, min(minPort, low/2))
		for range 100 {
			if addr, err := free(net.JoinHostPort("127.0.0.1", strconv.Itoa(floor+rand.IntN(low-floor)))); err == nil {
				return addr, nil
			}
		}
	}
	addr, err := free("127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	return addr, nil
}

// free reports whether addr can be listened on now, returning the address
// it got (a port of its own for port 0).
func free(addr string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// minPort is the lowest port FreeAddr picks below the ephemeral range,
// clear of the well-known and most registered services' ports, unless that
// range starts lower (then its lower half: from 1024 up).
const minPort = 20000

// ephemeralLow is the lowest port the kernel gives outgoing connections, or
// 0 if it does not say.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	low, _ := strconv.Atoi(f[0])
	return low
}
