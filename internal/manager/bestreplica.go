package manager

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
)

// copyPos is what a node reports of its copy of a vbucket in "stats
// vbucket": its state there, its history's lineage and its high seqno
// (the last mutation it applied; a replica numbers them as its producer
// did, so replicas of one active compare).
type copyPos struct {
	State string // "active", "replica", "pending", "dead"
	UUID  uint64
	Seqno uint64
	Items uint64
	// Source is where a replica is fed from (vb_N:source): "none" when
	// it follows nothing, "" when the node does not say (not a replica,
	// or a node from before the field).
	Source string
}

// holds reports whether the copy can be promoted as it is: a live copy,
// not one that was dropped or turned dead behind the manager's back.
func (p copyPos) holds() bool {
	return p.State == "replica" || p.State == "active" || p.State == "pending"
}

// unborn reports a copy with no lineage yet: a vbucket set replica (or
// pending) that no stream has fed since it was created or deleted. Its
// high seqno is what the node numbered before (sequence numbers keep
// growing across a DEL_VBUCKET), not anything it holds, so it ranks with
// the copies that hold nothing.
func (p copyPos) unborn() bool { return p.holds() && p.UUID == 0 }

// positions asks each of addrs, at once and for at most a second each,
// for the positions of its copies ("stats vbucket": one request a node,
// whatever the number of vbuckets). A node that does not answer is absent
// from the result.
func (m *Manager) positions(ctx context.Context, addrs []string) map[string]map[int]copyPos {
	var mu sync.Mutex // protects out
	out := map[string]map[int]copyPos{}
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Add(1)
		go func() { // owned by positions, which waits for it
			defer wg.Done()
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			var lines [][2]string
			err := m.conn(qctx, a, func(c *admin.Conn) error {
				c.Timeout = time.Second
				defer func() { c.Timeout = 5 * time.Second }()
				var err error
				lines, err = c.Stats("vbucket")
				return err
			})
			if err != nil {
				m.cfg.Logf("manager: asking %s where its copies are: %v", a, err)
				return
			}
			ps := parsePositions(lines)
			mu.Lock()
			out[a] = ps
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// parsePositions reads "stats vbucket" lines (vb_N STATE, vb_N:uuid,
// vb_N:high_seqno) into positions by vbucket.
func parsePositions(lines [][2]string) map[int]copyPos {
	ps := map[int]copyPos{}
	for _, kv := range lines {
		name, ok := strings.CutPrefix(kv[0], "vb_")
		if !ok {
			continue
		}
		num, field, _ := strings.Cut(name, ":")
		vb, err := strconv.Atoi(num)
		if err != nil {
			continue
		}
		p := ps[vb]
		switch field {
		case "":
			p.State = kv[1]
		case "uuid":
			p.UUID, _ = strconv.ParseUint(kv[1], 10, 64)
		case "high_seqno":
			p.Seqno, _ = strconv.ParseUint(kv[1], 10, 64)
		case "items":
			p.Items, _ = strconv.ParseUint(kv[1], 10, 64)
		case "source":
			p.Source = kv[1]
		default:
			continue
		}
		ps[vb] = p
	}
	return ps
}

// bestReplica picks which replica of row (server indexes, the failed
// active first) to promote: among the live ones (live), the one that
// holds the most of the failed active's history, that is the highest
// seqno its node reports for a copy it holds (pos), ties going by row
// order. Replicas whose node did not answer (pos false) come after every
// one that reported a copy, and replicas that reported none, or a copy
// with no lineage yet (unborn), come last: a promotion there makes the
// vbucket active, empty. It returns -1 when no
// replica is live, and says why it chose as it did where that is worth
// saying (the replicas' positions differ, or one came before it in row
// order): "" otherwise.
//
// Under --sync-replication an acknowledged write is on at least one
// replica (stream's Durability), and so on the one with the highest
// seqno: never is a replica that may lack an acknowledged write promoted
// while one that has it is alive.
//
// With the vbcache_unsafe_bestreplica build tag (promoteBest false) it
// takes the first live replica in row order, as failovers did before.
func bestReplica(row []int, live func(int) bool, pos func(i int) (copyPos, bool), name func(i int) string) (best int, why string) {
	const (
		reported = iota // a copy, at a known seqno
		silent          // its node did not answer
		none            // its node holds no copy
	)
	tier := func(i int) (int, copyPos) {
		p, ok := pos(i)
		switch {
		case !ok:
			return silent, p
		case !p.holds() || (promoteBest && p.unborn()):
			return none, p
		}
		return reported, p
	}
	best = -1
	var bt int
	var bp copyPos
	var cands []int
	for _, r := range row[1:] {
		if !live(r) {
			continue
		}
		cands = append(cands, r)
		t, p := tier(r)
		if best < 0 || (promoteBest && (t < bt || (t == reported && bt == reported && p.Seqno > bp.Seqno))) {
			best, bt, bp = r, t, p
		}
	}
	if len(cands) < 2 {
		return best, ""
	}
	differ := best != cands[0]
	var b strings.Builder
	for _, r := range cands {
		t, p := tier(r)
		if r == best {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		switch t {
		case reported:
			fmt.Fprintf(&b, "%s at %d", name(r), p.Seqno)
			differ = differ || bt != reported || p.Seqno != bp.Seqno || p.UUID != bp.UUID
		case silent:
			fmt.Fprintf(&b, "%s did not answer", name(r))
			differ = true
		case none:
			if p.unborn() {
				fmt.Fprintf(&b, "%s has no lineage yet (seqno %d)", name(r), p.Seqno)
			} else {
				fmt.Fprintf(&b, "%s holds no copy", name(r))
			}
			differ = true
		}
	}
	if !differ {
		return best, ""
	}
	switch {
	case !promoteBest:
		return best, fmt.Sprintf("the first live replica in row order (vbcache_unsafe_bestreplica); %s", b.String())
	case bt == reported:
		return best, fmt.Sprintf("it holds the most, seqno %d of lineage %016x; %s", bp.Seqno, bp.UUID, b.String())
	case bt == silent:
		return best, fmt.Sprintf("no replica reported a copy, it is the first whose node did not answer; %s", b.String())
	}
	return best, fmt.Sprintf("no replica holds a copy, it is the first live one; %s", b.String())
}
