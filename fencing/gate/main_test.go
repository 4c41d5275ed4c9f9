package gate_test

import (
	"testing"

	"github.com/leasehold/leasehold/fencing/fencingtest"
)

func TestMain(m *testing.M) { fencingtest.Main(m) }
