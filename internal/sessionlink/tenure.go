package sessionlink

// Tenure is one reported ownership: Release or Lose reports its end, and
// only the first call of either counts. Release's reason is why the library
// gave the ownership up on its own (nil when the caller asked).
type Tenure interface {
	Release(reason error)
	Lose(cause error)
}
