package watchstream_test

import (
	"testing"

	"github.com/leasehold/leasehold/internal/watchstream"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The reasons etcd gives for a refused create, as the Mux reads them (a
// cancel reason: the gRPC status's text) and as clientv3 reports them (an
// error of its own): those of the stream's token, and the others.
func TestTokenRefusal(t *testing.T) {
	for _, tc := range []struct {
		err   error
		token bool
	}{
		{rpctypes.ErrGRPCInvalidAuthToken, true},
		{rpctypes.ErrInvalidAuthToken, true},
		{rpctypes.ErrGRPCAuthOldRevision, true},
		{rpctypes.ErrAuthOldRevision, true},
		{rpctypes.ErrGRPCUserEmpty, true},
		{rpctypes.ErrUserEmpty, true},
		{rpctypes.ErrGRPCPermissionDenied, false},
		{rpctypes.ErrPermissionDenied, false},
		{rpctypes.ErrGRPCCompacted, false},
		{rpctypes.ErrNoLeader, false},
	} {
		if got := watchstream.TokenRefusal(tc.err.Error()); got != tc.token {
			t.Errorf("TokenRefusal(%q) = %v, want %v", tc.err.Error(), got, tc.token)
		}
	}
	if watchstream.TokenRefusal("") {
		t.Error(`TokenRefusal("") = true`)
	}
}
