package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/election"
	"github.com/leasehold/leasehold/fencing"
	"github.com/leasehold/leasehold/fencing/inspect"
)

// screen draws snapshots of queues or of a group: as tables, redrawn in place on a
// terminal, or as JSON, one document per line.
type screen struct {
	w     io.Writer
	log   *slog.Logger // where problems go when the output is JSON
	json  bool
	tty   bool // clear the terminal before each redraw
	drawn bool
}

func newScreen(w io.Writer, output string, log *slog.Logger) *screen {
	s := &screen{w: w, log: log, json: output == "json"}
	if f, ok := w.(*os.File); ok && !s.json {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			s.tty = true
		}
	}
	return s
}

func (s *screen) draw(qs []shown, now time.Time) error {
	return s.frame(qs, now, func(b *strings.Builder) {
		if len(qs) == 0 {
			b.WriteString("nothing held or awaited\n")
		}
		for _, q := range qs {
			table(b, q)
		}
	})
}

func (s *screen) drawGroup(g election.Group, now time.Time) error {
	return s.frame(g, now, func(b *strings.Builder) { groupTable(b, g) })
}

// frame draws one snapshot: v as one line of JSON, or the table body
// writes, under the time, in place of the last one on a terminal.
func (s *screen) frame(v any, now time.Time, body func(*strings.Builder)) error {
	if s.json {
		return json.NewEncoder(s.w).Encode(v) // one line per snapshot, for jq and scripts
	}
	var b strings.Builder
	switch {
	case s.tty:
		b.WriteString("\x1b[H\x1b[2J")
	case s.drawn:
		b.WriteString("\n")
	}
	s.drawn = true
	fmt.Fprintf(&b, "%s\n", now.Format(time.DateTime))
	body(&b)
	_, err := io.WriteString(s.w, b.String())
	return err
}

// problem reports a failed redraw without ending a watch: in the table,
// or on the log (stderr) when stdout is JSON for a program to read.
func (s *screen) problem(err error) {
	if s.json {
		s.log.Warn("could not read etcd; retrying", "err", err)
		return
	}
	fmt.Fprintf(s.w, "(could not read etcd: %v)\n", err)
}

// table prints one queue: the holders first, then the waiters in order.
func table(b *strings.Builder, q shown) {
	fmt.Fprintf(b, "\n%s %q at revision %d: ", q.Kind, q.Name, q.Revision)
	defer candidates(b, q.Candidates)
	if len(q.Entries) == 0 {
		b.WriteString("free\n")
		return
	}
	waiting := len(q.Waiters())
	switch q.Kind {
	case fencing.KindSemaphore:
		set := ""
		if q.LimitSet {
			set = " (the name's own, SetLimit)"
		}
		used := 0
		for _, e := range q.Holders() {
			used += e.Units
		}
		fmt.Fprintf(b, "limit %d%s, %d units in use by %d holds, %d waiting\n", q.Limit, set, used, len(q.Holders()), waiting)
	case fencing.KindRWLock:
		if o, _ := q.Owner(); o.Mode == "write" {
			fmt.Fprintf(b, "a writer in, %d waiting\n", waiting)
		} else {
			fmt.Fprintf(b, "%d readers in, %d waiting\n", len(q.Holders()), waiting)
		}
	default:
		fmt.Fprintf(b, "%d waiting\n", waiting)
	}
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ROLE\tTOKEN\tVALUE\tLEASE\tTTL LEFT")
	for _, e := range q.Entries {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%x\t%s\n", role(q.Kind, e), e.Token, printable(e.Value), int64(e.Lease), ttl(e))
	}
	tw.Flush()
}

// candidates prints an election's ranked candidates, if any: their
// priority, and which are preferred (only those campaign).
func candidates(b *strings.Builder, cs []election.Candidate) {
	if len(cs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CANDIDATE\tPRIORITY\tDRAINED\tPREFERRED")
	for _, c := range cs {
		fmt.Fprintf(tw, "  %s\t%s\t%t\t%t\n", printable(c.ID), priority(c.Priority), c.Drain, c.Preferred)
	}
	tw.Flush()
}

// priority shows priority levels as a version is written: 1.28.3.
func priority(p []int64) string {
	if len(p) == 0 {
		return "-"
	}
	s := make([]string, len(p))
	for i, l := range p {
		s[i] = fmt.Sprint(l)
	}
	return strings.Join(s, ".")
}

// role names what an entry is to its queue: owner, leader, holder (of a
// semaphore's permit), reader or writer (in), or waiter (a waiting reader
// or writer, for a read-write lock).
func role(kind fencing.Kind, e inspect.Entry) string {
	who := map[string]string{"read": "reader", "write": "writer"}[e.Mode]
	switch {
	case who != "" && !e.Holds:
		return "waiting " + who
	case who != "":
		return who
	case !e.Holds && e.Units > 1:
		return fmt.Sprintf("waiter (%d units)", e.Units)
	case !e.Holds:
		return "waiter"
	case kind == fencing.KindElection:
		return "leader"
	case kind == fencing.KindSemaphore && e.Units > 1:
		return fmt.Sprintf("holder (%d units)", e.Units)
	case kind == fencing.KindSemaphore:
		return "holder"
	}
	return "owner"
}

// groupTable prints a group: a summary, its replicas in the order they
// joined, then its names.
func groupTable(b *strings.Builder, g election.Group) {
	fmt.Fprintf(b, "\ngroup %q at revision %d: replicas %d, names %d, cap %d, misplaced %d, excess %d\n",
		g.Name, g.Revision, len(g.Replicas), len(g.Names), g.Cap, g.Misplaced, g.Excess)
	if len(g.Replicas) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  REPLICA\tLEASE\tLEADS\tASSIGNED\tLISTED\tDECLINED\tCAP\tWEIGHT\tPRIORITY")
	for _, r := range g.Replicas {
		rank := priority(r.Priority)
		if r.Drain {
			rank += " (drained)"
		}
		fmt.Fprintf(tw, "  %s\t%x\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", printable(r.Identity), int64(r.Lease), r.Leads, r.Assigned,
			r.Listed, len(r.Declined), r.Cap, r.Weight, rank)
	}
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tASSIGNED\tLEADER\tTOKEN")
	for _, n := range g.Names {
		leader, token := "-", "-"
		if n.Leader != nil {
			leader, token = printable(n.Leader.Value), fmt.Sprint(n.Leader.Token.Revision)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", printable(n.Name), printable(n.Assigned), leader, token)
	}
	tw.Flush()
}

// ttl shows the lease's time left, and flags a holder that missed renewals:
// a live session renews every third of its TTL.
func ttl(e inspect.Entry) string {
	switch {
	case e.Expired:
		return "EXPIRED"
	case e.GrantedTTL == 0:
		return "-"
	case e.TTL+time.Second < e.GrantedTTL*2/3: // see inspect.Entry.TTL
		return fmt.Sprintf("%v/%v LATE", e.TTL, e.GrantedTTL)
	}
	return fmt.Sprintf("%v/%v", e.TTL, e.GrantedTTL)
}

// printable keeps a value on one line and short.
func printable(v string) string {
	if r := []rune(v); len(r) > 40 {
		v = string(r[:40]) + "…"
	}
	return fmt.Sprintf("%q", v)
}
