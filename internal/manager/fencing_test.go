package manager

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFencing runs the scripts in testdata/fencing/*.txt (the format of
// TestDecisions) against the lease rules of fencing.go. A script is one
// scenario on a fake clock: times are offsets from the leadership's
// start, written as durations ("1.5s").
//
//	lead lease=5s
//	    A new leadership at 0s with that lease: no records.
//	grants nodes=a,b,c quorum=a,b,c from=1s until=5s [every=1s] [rtt=10ms] [silent=a@3s,...]
//	    Probe rounds: each node is sent a grant naming quorum at every
//	    tick, answered rtt later, except a node from its silent time on
//	    (sent, never answered). Prints each node's record.
//	stop node=a
//	    Failover stops the grants to a: prints when its manager lease has
//	    surely ended.
//	reachable node=a live=b,c [current=a,b,c]
//	    quorumsReachable with the live members.
//	peer node=a now=9s pushed=b@8.5s,c@8.6s push-end=8.6s [current=a,b,c]
//	    peerLease after a failover's push: sure, when it will be, or never.
func TestFencing(t *testing.T) {
	files, err := filepath.Glob("testdata/fencing/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			sc := &fenceScenario{}
			runScript(t, f, sc.run)
		})
	}
}

// fenceScenario is a script's state.
type fenceScenario struct {
	t0   time.Time
	p    leaseParams
	recs map[string]*leaseRec
}

func (sc *fenceScenario) at(s string) (time.Time, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, err
	}
	return sc.t0.Add(d), nil
}

func (sc *fenceScenario) rel(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Sub(sc.t0).Round(time.Millisecond).String()
}

func (sc *fenceScenario) show(name string) string {
	r := sc.recs[name]
	if r == nil {
		return name + ": never granted\n"
	}
	var qs []string
	for _, q := range r.quorums {
		qs = append(qs, fmt.Sprintf("%s from %d", strings.Join(q.set, ","), q.from))
	}
	return fmt.Sprintf("%s: sent %d, answered %d (at %s), vouched %s..%s, quorums [%s]\n", name, r.seq, r.ackedSeq,
		sc.rel(r.ackedAt), sc.rel(r.heldFrom), sc.rel(r.heldUntil), strings.Join(qs, "; "))
}

func (sc *fenceScenario) run(line string, _ []string) (string, error) {
	fields := strings.Fields(line)
	args := map[string]string{}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		args[k] = v
	}
	dur := func(k, def string) (time.Duration, error) {
		v := args[k]
		if v == "" {
			v = def
		}
		return time.ParseDuration(v)
	}
	switch fields[0] {
	case "lead":
		l, err := dur("lease", "5s")
		if err != nil {
			return "", err
		}
		sc.t0, sc.p, sc.recs = time.Unix(1000, 0), newLeaseParams(l), map[string]*leaseRec{}
		return fmt.Sprintf("lease %v, margin %v, vouch %v\n", sc.p.L, sc.p.Margin, sc.p.vouch()), nil
	case "grants":
		from, err1 := sc.at(args["from"])
		until, err2 := sc.at(args["until"])
		every, err3 := dur("every", "1s")
		rtt, err4 := dur("rtt", "10ms")
		for _, err := range []error{err1, err2, err3, err4} {
			if err != nil {
				return "", err
			}
		}
		silent := map[string]time.Time{}
		for _, kv := range splitList(args["silent"]) {
			n, ts, _ := strings.Cut(kv, "@")
			t, err := sc.at(ts)
			if err != nil {
				return "", err
			}
			silent[n] = t
		}
		nodes, quorum := splitList(args["nodes"]), splitList(args["quorum"])
		for t := from; !t.After(until); t = t.Add(every) {
			for _, n := range nodes {
				r := sc.recs[n]
				if r == nil {
					r = &leaseRec{}
					sc.recs[n] = r
				}
				if r.stopped {
					continue
				}
				ackedSent := r.ackedSent
				seq, acked := r.sending(quorum)
				if s, ok := silent[n]; ok && !t.Before(s) {
					continue
				}
				r.answered(sc.p, seq, t, t.Add(rtt), acked, ackedSent)
			}
		}
		var b strings.Builder
		for _, n := range nodes {
			b.WriteString(sc.show(n))
		}
		return b.String(), nil
	case "stop":
		r := sc.recs[args["node"]]
		if r != nil {
			r.stopped = true
		}
		return fmt.Sprintf("%s's manager lease surely over at %s\n", args["node"], sc.rel(sc.p.managerLeaseEnd(r, sc.t0))), nil
	case "reachable":
		live := map[string]bool{}
		for _, n := range splitList(args["live"]) {
			live[n] = true
		}
		ok, why := quorumsReachable(args["node"], sc.recs[args["node"]], splitList(args["current"]), func(a string) bool { return live[a] })
		if ok {
			return "yes\n", nil
		}
		return "no: " + why + "\n", nil
	case "peer":
		now, err1 := sc.at(args["now"])
		end, err2 := sc.at(args["push-end"])
		if err1 != nil || err2 != nil {
			return "", fmt.Errorf("now, push-end: %v %v", err1, err2)
		}
		pushed := map[string]time.Time{}
		for _, kv := range splitList(args["pushed"]) {
			n, ts, _ := strings.Cut(kv, "@")
			t, err := sc.at(ts)
			if err != nil {
				return "", err
			}
			pushed[n] = t
		}
		v := sc.p.peerLease(now, args["node"], sc.recs[args["node"]], splitList(args["current"]), sc.recs, pushed, end)
		switch {
		case v.Sure:
			return "sure: promote now\n", nil
		case !v.At.IsZero():
			return fmt.Sprintf("promote at %s: %s\n", sc.rel(v.At), v.Why), nil
		}
		return "never without --force: " + v.Why + "\n", nil
	}
	return "", fmt.Errorf("unknown command %q", fields[0])
}
