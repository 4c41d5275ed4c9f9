package compat_test

import (
	"testing"

	"github.com/leasehold/leasehold/internal/etcdtest"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }
