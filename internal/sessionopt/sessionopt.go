// Package sessionopt is what fencing.SessionOption sets. It lives here so
// that packages built on sessions (election.Run) can read the options they
// are handed, the logger say, without fencing exporting its configuration.
// O is fencing.Observer, which this package cannot name.
package sessionopt

import (
	"log/slog"
	"time"
)

// Config is a session's configuration, as its options left it.
type Config[O any] struct {
	TTL       time.Duration
	Margin    time.Duration
	MarginSet bool // Margin was set by WithSafetyMargin
	Logger    *slog.Logger
	Identity  string
	Root      string
	Observer  O
	InFlight  int // at most this many requests out at once
}
