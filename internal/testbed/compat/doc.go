// Package compat runs the library's public API against a real etcd server
// of another version, started as a separate process: version-skew tests.
// LEASEHOLD_ETCD_BIN names the server binary (scripts/build-etcd.sh builds
// 3.5 and later from the Go module proxy; Debian's etcd-server package is
// 3.4); without it every test skips. It has no code of its own: see
// compat_test.go and RELIABILITY.md, "Version skew".
package compat
