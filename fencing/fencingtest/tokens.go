package fencingtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// tokens is how a cluster's members make auth tokens.
type tokens struct {
	kind string // etcd's --auth-token; "": simple tokens
	ttl  uint   // --auth-token-ttl, seconds, of simple tokens; 0: etcd's 300
}

// singleJWT starts a one-member cluster whose auth tokens are JWTs, signed
// with a key made for it and valid for ttl (etcd's --auth-token jwt). A JWT
// expires at its time however much it is used, under every stream opened
// with it. Auth is off until EnableAuth.
func singleJWT(t TB, ttl time.Duration) *Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "fencingtest-jwt-")
	if err != nil {
		t.Fatalf("fencingtest: JWT keys: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	kind, err := jwtKeys(dir, ttl)
	if err != nil {
		t.Fatalf("fencingtest: JWT keys: %v", err)
	}
	return newCluster(t, 1, nil, tokens{kind: kind})
}

// singleTokenTTL starts a one-member cluster whose simple auth tokens (etcd's
// default kind) expire once unused for ttl, rounded down to whole seconds
// and at least one (etcd's --auth-token-ttl, 300 s by default). A token
// expires under a stream opened with it while the client's other requests
// use a newer one. Auth is off until EnableAuth.
func singleTokenTTL(t TB, ttl time.Duration) *Cluster {
	t.Helper()
	return newCluster(t, 1, nil, tokens{ttl: uint(max(1, ttl/time.Second))})
}

// jwtKeys writes a new ES256 key pair into dir and returns the --auth-token
// value that signs with it.
func jwtKeys(dir string, ttl time.Duration) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", err
	}
	privPath, pubPath := filepath.Join(dir, "jwt.key"), filepath.Join(dir, "jwt.pub")
	for path, block := range map[string]*pem.Block{privPath: {Type: "PRIVATE KEY", Bytes: priv}, pubPath: {Type: "PUBLIC KEY", Bytes: pub}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("jwt,pub-key=%s,priv-key=%s,sign-method=ES256,ttl=%v", pubPath, privPath, ttl), nil
}
