package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// embedded is a one-member etcd in this process, with its data in a
// temporary directory.
type embedded struct {
	etcd *embed.Etcd
	dir  string
	URL  string
}

func startEmbedded() (*embedded, error) {
	dir, err := os.MkdirTemp("", "leasehold-demo-")
	if err != nil {
		return nil, err
	}
	client, err := freeURL()
	if err != nil {
		return nil, err
	}
	peer, err := freeURL()
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded etcd not ready after 30s")
	}
	return &embedded{etcd: e, dir: dir, URL: client.String()}, nil
}

func (e *embedded) Close() {
	e.etcd.Close()
	os.RemoveAll(e.dir)
}

func freeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}, nil
}
