package gate

// Names exposes how many names a Gate keeps a lock for.
func Names(g *Gate) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.names)
}
