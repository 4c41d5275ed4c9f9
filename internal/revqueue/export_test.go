package revqueue

// Sweep and SweepPage are for the external tests.
var Sweep = sweep

const SweepPage = sweepPage
