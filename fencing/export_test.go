package fencing

// KeyPoolSize exposes the session's key pool's size to the growth tests.
func KeyPoolSize(s *Session) (free, inUse, swept int) { return s.link.Keys.Size() }

// SweptRanges exposes the key ranges the session sweeps.
func SweptRanges(s *Session) []string { return s.link.Sweeps.Ranges() }

// KeyStem exposes the start of the session's keys in a queue.
func KeyStem(s *Session) string { return s.link.KeyStem }

// GateNames exposes how many names a Gate keeps a lock for.
func GateNames(g *Gate) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.names)
}
