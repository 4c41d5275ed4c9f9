package redisfence

// Slot is slot, for the tests that hold it against a real server.
var Slot = slot
