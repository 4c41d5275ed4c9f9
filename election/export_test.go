package election

import "time"

// WithDeclineFor sets how long a RunGroup replica declines a failing name,
// so that a test need not wait five minutes for a decline to end.
func WithDeclineFor(d time.Duration) RunOption { return func(c *runConfig) { c.declineFor = d } }
