package ownwatch_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/leasehold/leasehold/internal/ownwatch"
)

// Each registration of an ownership hears its loss until it unregisters,
// whatever the others of the same ownership do, and no registration of the
// key's next life hears it.
func TestRegistryReachesEachRegistrationOnce(t *testing.T) {
	var reg ownwatch.Registry
	heard := map[string]int{}
	on := func(name string) func(error) { return func(error) { heard[name]++ } }
	stopA := reg.Register("k", 1, on("a"))
	stopB := reg.Register("k", 1, on("b"))
	stopC := reg.Register("k", 1, on("c"))
	stopNext := reg.Register("k", 2, on("next"))
	stopB()
	stopB() // unregistering is idempotent
	// A registration may unregister itself, and register again, from its
	// callback: Lost calls them with no lock held.
	var stopD, stopE func()
	stopD = reg.Register("k", 1, func(error) {
		heard["d"]++
		stopD()
		stopE = reg.Register("k", 1, on("e"))
	})
	reg.Lost("k", 1, errors.New("gone"))
	if want := map[string]int{"a": 1, "c": 1, "d": 1}; !maps.Equal(heard, want) {
		t.Fatalf("after b unregistered and k@1 was lost, heard %v; want %v", heard, want)
	}
	reg.Lost("k", 1, errors.New("gone again"))
	if want := map[string]int{"a": 2, "c": 2, "d": 1, "e": 1}; !maps.Equal(heard, want) {
		t.Fatalf("after d unregistered itself for e, and k@1 was lost again, heard %v; want %v", heard, want)
	}
	stopA()
	stopC()
	stopE()
	if reg.Len() != 1 {
		t.Fatalf("%d ownerships registered with only k@2 left; want 1", reg.Len())
	}
	stopNext()
	if reg.Len() != 0 {
		t.Fatalf("%d ownerships registered after every unregister; want 0", reg.Len())
	}
}
