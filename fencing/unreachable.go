package fencing

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// unreachable adds to err, a request that ctx ended before etcd answered,
// the endpoints and why the client cannot reach them: clientv3 waits for a
// connection until the deadline and then reports only the deadline.
func unreachable(ctx context.Context, cli *clientv3.Client, err error) error {
	if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	conn := cli.ActiveConnection()
	if conn == nil { // a client without a connection of its own (clientv3.NewCtxClient)
		return err
	}
	state := conn.GetState()
	if state == connectivity.Ready {
		return fmt.Errorf("%w (etcd at %v connected, but had not answered)", err, cli.Endpoints())
	}
	if state != connectivity.TransientFailure {
		return fmt.Errorf("%w (etcd at %v: connection %s)", err, cli.Endpoints(), state)
	}
	// Failing fast, gRPC returns the last dial error at once; the bound only
	// covers a connection that changes state meanwhile.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 50*time.Millisecond)
	defer cancel()
	_, why := pb.NewMaintenanceClient(conn).Status(pctx, &pb.StatusRequest{}, grpc.WaitForReady(false))
	if why == nil {
		return fmt.Errorf("%w (etcd at %v answers now)", err, cli.Endpoints())
	}
	return fmt.Errorf("%w (cannot reach etcd at %v: %v)", err, cli.Endpoints(), why)
}
