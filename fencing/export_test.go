package fencing

// The two steps of an inspect, for a test that acts between them.
var (
	ReadQueues = readQueues
	ReadLeases = readLeases
)
