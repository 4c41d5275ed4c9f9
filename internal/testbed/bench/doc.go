// Package bench holds the benchmarks that measure leasehold side by side
// with etcd's client/v3/concurrency package, on the same embedded etcd in
// the same run. It has no code of its own: see its _test.go files and
// BENCHMARKS.md.
package bench
