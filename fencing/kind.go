package fencing

// Kind says what an ownership is.
type Kind string

const (
	KindLock      Kind = "lock"      // a Hold of a Mutex
	KindSemaphore Kind = "semaphore" // a Hold of one of a Semaphore's permits
	KindRWLock    Kind = "rwlock"    // a Hold of an RWMutex, read or write
	KindElection  Kind = "election"  // a term of an election (package election)
)
