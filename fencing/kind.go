package fencing

import "github.com/leasehold/leasehold/internal/keyspace"

// Kind says what an ownership is.
type Kind string

const (
	KindLock      Kind = "lock"                 // a Hold of a Mutex
	KindSemaphore Kind = keyspace.KindSemaphore // a Hold of units of a Semaphore
	KindRWLock    Kind = "rwlock"               // a Hold of an RWMutex, read or write
	KindElection  Kind = "election"             // a term of an election (package election)
)
