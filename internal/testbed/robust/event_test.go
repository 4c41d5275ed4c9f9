package robust_test

import "testing"

// Events cross the process boundary as text: every kind survives the trip.
func TestEventRoundTrip(t *testing.T) {
	for _, e := range []event{
		{worker: "p0", kind: "acquire", token: 5},
		{worker: "p1", kind: "write", token: 5, value: 3, rev: 9, outcome: "ok"},
		{worker: "g1", kind: "write", token: 5, value: 3, rev: 9, outcome: "ok", name: "group/job-1"},
	} {
		got, ok := parseEvent(e.String())
		if !ok || got != e {
			t.Errorf("parseEvent(%q) = %+v, %v; want %+v", e.String(), got, ok, e)
		}
	}
}
