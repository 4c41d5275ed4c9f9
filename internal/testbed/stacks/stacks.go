// Package stacks counts the goroutines blocked in a function, from a dump of
// every goroutine's stack: how a test waits for calls to reach a wait that
// the library keeps no counter of (a place in flight, say) without adding
// one to the library's hot path.
package stacks

import (
	"runtime"
	"strings"
)

// Blocked returns how many goroutines are parked (in a select, a channel
// operation or a lock) with fn, a function's full name as a stack shows it
// ("github.com/…/admit.(*Places).Enter"), at the top of their own code: the
// frames above it are the runtime's.
func Blocked(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, frames, _ := strings.Cut(g, "\n")
		if !parked(header) {
			continue
		}
		if top := firstOutsideRuntime(frames); top == fn {
			count++
		}
	}
	return count
}

// parked reports whether a goroutine's header ("goroutine 7 [select]:")
// says it waits.
func parked(header string) bool {
	for _, s := range []string{"[select", "[chan send", "[chan receive", "[sync.Mutex.Lock", "[sync.Cond.Wait", "[semacquire"} {
		if strings.Contains(header, s) {
			return true
		}
	}
	return false
}

// firstOutsideRuntime returns the first function of frames (a stack's lines
// after its header: a function line, then its file line) that is not the
// runtime's or sync's.
func firstOutsideRuntime(frames string) string {
	lines := strings.Split(frames, "\n")
	for i := 0; i < len(lines); i += 2 {
		name := lines[i]
		if j := strings.LastIndex(name, "("); j > 0 {
			name = name[:j] // the arguments
		}
		if strings.HasPrefix(name, "runtime.") || strings.HasPrefix(name, "sync.") || strings.HasPrefix(name, "internal/sync.") {
			continue
		}
		return name
	}
	return ""
}
