// Command demo tells the leasehold story on an embedded etcd: workers elect a
// leader, the leader is paused past its lease, another takes over with a
// greater token, and the old leader's late writes are rejected.
//
// It is not built yet (issue #6); for now it says so and exits with status 2.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "leasehold demo: not built yet (issue #6). Run `go test ./...` to see the library tested against a real embedded etcd.")
	os.Exit(2)
}
