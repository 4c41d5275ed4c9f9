// Package election is leader election on the revision mutex: Campaign,
// Proclaim, Resign, Leader and Observe, and Run, the singleton worker.
//
// Not yet implemented: see issue #5.
package election
