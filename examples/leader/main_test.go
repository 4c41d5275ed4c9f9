package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/etcdtest"
	"github.com/leasehold/leasehold/internal/fencingtest"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

func get(t *testing.T, srv *httptest.Server) (int, leaderJSON) {
	resp, err := srv.Client().Get(srv.URL + "/leader")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l leaderJSON
	json.NewDecoder(resp.Body).Decode(&l)
	return resp.StatusCode, l
}

func post(t *testing.T, srv *httptest.Server, path string) int {
	resp, err := srv.Client().Post(srv.URL+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Two replicas agree on the leader; the leader's resign hands over; only the
// leader may proclaim, and the new value is what both report.
func TestReplicas(t *testing.T) {
	c := etcdtest.Single(t)
	ctx, cancel := context.WithCancel(t.Context())
	var srvs []*httptest.Server
	var reps []*replica
	for _, v := range []string{"a", "b"} {
		r, err := newReplica(ctx, fencingtest.Session(t, c.Client(t)), "test", v)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		srvs, reps = append(srvs, srv), append(reps, r)
	}
	t.Cleanup(func() {
		cancel()
		for _, r := range reps {
			r.wait()
		}
	})
	var first leaderJSON
	etcdtest.WaitFor(t, 30*time.Second, "both replicas to see one leader", func() bool {
		c0, l0 := get(t, srvs[0])
		c1, l1 := get(t, srvs[1])
		first = l0
		return c0 == 200 && c1 == 200 && l0.Token == l1.Token && l0.Self != l1.Self
	})
	lead, follow := srvs[0], srvs[1]
	if first.Value == "b" {
		lead, follow = follow, lead
	}
	if code := post(t, follow, "/proclaim?value=x"); code != http.StatusConflict {
		t.Fatalf("follower proclaim: %d; want 409", code)
	}
	if code := post(t, lead, "/resign"); code != http.StatusOK {
		t.Fatalf("leader resign: %d", code)
	}
	etcdtest.WaitFor(t, 30*time.Second, "the other replica to lead", func() bool {
		code, l := get(t, follow)
		return code == 200 && l.Self && l.Token != first.Token
	})
	if code := post(t, follow, "/proclaim?value=b2"); code != http.StatusOK {
		t.Fatalf("new leader proclaim: %d", code)
	}
	etcdtest.WaitFor(t, 30*time.Second, "the proclaimed value", func() bool {
		code, l := get(t, lead)
		return code == 200 && l.Value == "b2" && !l.Self
	})
	for _, srv := range srvs {
		resp, err := srv.Client().Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz of a replica in good standing: %d", resp.StatusCode)
		}
	}
}
