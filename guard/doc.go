// Package guard makes etcd writes that commit only while an owner still holds
// its lock or term, and contexts that end the moment ownership is lost.
//
// Not yet implemented: see issue #4.
package guard
