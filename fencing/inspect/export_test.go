package inspect

// The two steps of a Read, for a test that acts between them.
var (
	ReadQueues = readQueues
	ReadLeases = readLeases
)
