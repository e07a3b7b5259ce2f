package move

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// reach is how a node answered.
type reach uint8

const (
	reachOK      reach = iota // it answered
	reachRefused              // connection refused: nothing listens there
	reachNoReply              // timeout, reset, an error answer: it may be alive
	reachFenced               // not asked: the caller has proof it serves nothing (Promote)
)

// view is one observation of one node.
type view struct {
	reach     reach
	err       error         // why not reachOK
	state     vbucket.State // the vbucket's state there
	pid       string        // the process id ("stats" pid)
	restarted bool          // pid differs from the preflight's: its copies are gone
	streaming bool          // a takeover stream of the vbucket between the two ends is open here
	fed       bool          // a stream of the vbucket fed from the other end, replication too, is open here
	items     uint64        // the vbucket's items there ("stats vbucket N")
	high      uint64        // its high seqno there (0: none)
	uuid      uint64        // its lineage there (0: none: no stream ever fed or opened it in this process, or it was deleted since)
}

// empty reports whether the node holds nothing of the vbucket: no item
// and no sequence number.
func (v view) empty() bool { return v.reach == reachOK && v.items == 0 && v.high == 0 }

// lost reports whether the node's copy of the vbucket is certainly gone,
// or as good as gone: its process is gone or was replaced, or it is
// fenced (it serves nothing and cannot turn anything active elsewhere;
// Promote).
func (v view) lost() bool {
	return v.reach == reachRefused || v.reach == reachFenced || (v.reach == reachOK && v.restarted)
}

func (v view) String() string {
	switch v.reach {
	case reachRefused:
		return "connection refused (process gone)"
	case reachNoReply:
		return fmt.Sprintf("no answer (%v)", v.err)
	case reachFenced:
		return "fenced (not asked)"
	}
	s := v.state.String()
	if v.restarted {
		s += ", restarted (pid " + v.pid + ")"
	}
	if v.empty() {
		s += ", empty"
	} else {
		s += fmt.Sprintf(", %d items to seqno %d", v.items, v.high)
	}
	if v.streaming {
		s += ", stream open"
	}
	return s
}

// observe asks the node at addr for the vbucket's state, its pid (compared
// with pid0 when set) and whether a takeover stream of the vbucket is open
// there: a takeover's consumer fed from peer (on the target), or a takeover producer (on
// the source; the producer names the consumer by the target's own name,
// which need not be the address Move uses, so any takeover stream of the
// vbucket counts).
func (m *mover) observe(ctx context.Context, addr, pid0, peer string) view {
	var v view
	err := m.withReadConn(ctx, addr, func(c *admin.Conn) error {
		// Streams first, then the state: a producer turns the vbucket
		// back active before its stream leaves "stats streams", so a
		// view with no stream open shows the state after the revert.
		// "streams N" lists only vb's streams (and a line per
		// producer): on a node replicating 1024 vbuckets the whole
		// group is thousands of lines, and the manager looks at two
		// nodes before every move.
		streams, err := c.Stats("streams " + strconv.Itoa(m.vb))
		if err != nil {
			return err
		}
		v.streaming = streamOpen(streams, m.vb, peer)
		v.fed = peer != "" && fedFrom(streams, m.vb, peer)
		vbs, err := c.Stats("vbucket " + strconv.Itoa(m.vb))
		if err != nil {
			return err
		}
		p := "vb_" + strconv.Itoa(m.vb) + ":"
		for _, kv := range vbs {
			switch kv[0] {
			case p + "items":
				v.items, _ = strconv.ParseUint(kv[1], 10, 64)
			case p + "high_seqno":
				v.high, _ = strconv.ParseUint(kv[1], 10, 64)
			case p + "uuid":
				v.uuid, _ = strconv.ParseUint(kv[1], 10, 64)
			}
		}
		st, err := c.GetVBucket(m.vb)
		if err != nil {
			return err
		}
		v.state = st
		gen, err := c.Stats("")
		if err != nil {
			return err
		}
		for _, kv := range gen {
			if kv[0] == "pid" {
				v.pid = kv[1]
			}
		}
		v.restarted = pid0 != "" && v.pid != pid0
		return nil
	})
	switch {
	case err == nil:
		v.reach = reachOK
	case admin.Refused(err):
		v.reach, v.err = reachRefused, err
	default:
		v.reach, v.err = reachNoReply, err
	}
	return v
}

// streamOpen reports whether "stats streams" lines show a takeover
// stream of vb: a takeover's consumer of it fed from peer (peer != ""),
// or a takeover producer of it. The lines are
// "consumer:<src>:vb_<n>:type" and "producer:<name>:vb_<n>:type", each
// "takeover" or "replication"; names hold colons, so the vbucket is found
// from the end. Replication cannot turn the target active: R2 waited on a
// target that was the vbucket's replica, fed from the source, until
// Settle ran out (issue 43: 9 s unserved in one schedule run).
func streamOpen(lines [][2]string, vb int, peer string) bool {
	vbPart := ":vb_" + strconv.Itoa(vb) + ":"
	for _, kv := range lines {
		k := kv[0]
		if peer != "" && k == "consumer:"+peer+vbPart+"type" && kv[1] == "takeover" {
			return true
		}
		if strings.HasPrefix(k, "producer:") && strings.HasSuffix(k, vbPart+"type") && kv[1] == "takeover" {
			return true
		}
	}
	return false
}

// fedFrom reports whether "stats streams" lines show a consumer of vb fed
// from peer, of either type.
func fedFrom(lines [][2]string, vb int, peer string) bool {
	p := "consumer:" + peer + ":vb_" + strconv.Itoa(vb) + ":"
	for _, kv := range lines {
		if strings.HasPrefix(kv[0], p) {
			return true
		}
	}
	return false
}

// action is what a recovery rule decides.
type action uint8

const (
	actWait       action = iota // not settled yet: look again
	actMoved                    // R1: the target is active
	actAborted                  // R3: the source is active
	actReactivate               // R4: set the source active again
	actPromote                  // R5: set the target active
	actUnresolved               // nothing safe to do
)

// decide is the recovery rules of the package comment, as a pure function
// of one observation of the source (f) and the target (t). rule names the
// rule for the report.
func decide(f, t view) (a action, rule string) {
	fActive := f.reach == reachOK && f.state == vbucket.Active
	// R1. The target turns active only when the source, already dead for
	// good, tells it to: the move happened. Both active would break the
	// protocol's promise; touch nothing.
	if t.reach == reachOK && t.state == vbucket.Active {
		if fActive {
			return actUnresolved, "both-active"
		}
		return actMoved, "R1"
	}
	// R2. A pending target or an open stream: the handover may still
	// turn the target active (or the source back active). Wait.
	if (t.reach == reachOK && (t.state == vbucket.Pending || t.streaming)) || (f.reach == reachOK && f.streaming) {
		return actWait, "R2"
	}
	// R3. The source is active: it never sent "go active" (it stays dead
	// once it has), so the target is not active and, its stream closed,
	// cannot become so.
	if fActive {
		if f.restarted {
			// A new process holds it active: someone else set it so.
			// Not this move's doing; touch nothing.
			return actUnresolved, "source-restarted-active"
		}
		return actAborted, "R3"
	}
	// A dead source that holds nothing while the target, a replica,
	// holds items is a restarted process that Recover, which knows no process ids, did
	// not recognise (issue 43): a source that handed over keeps its
	// copy, dead, until the move deletes it. Lost, as R5 has it: set
	// active again, it would be active empty, and the target's copy
	// dropped.
	emptied := emptySourceLost && f.reach == reachOK && !f.restarted && (f.state == vbucket.Dead || f.state == vbucket.Unknown) &&
		f.empty() && t.reach == reachOK && !t.restarted && t.state == vbucket.Replica && t.items > 0
	// A dead source with no lineage for the vbucket holds no history of
	// it: a source that began a handover has one (its takeover stream
	// opened it) until the move deletes the copy, once the target is
	// active. It is a process started again, which Recover (no process
	// ids) did not recognise, or a copy deleted behind the move's back.
	// Set active again it would be active empty, while the vbucket's
	// replicas (no end of this move) may hold the data: nothing is done
	// here, and the restart rule or a failover promotes the best copy.
	// A target that does not answer may have turned active: wait.
	if sourceHistory && !emptied && f.reach == reachOK && !f.restarted && (f.state == vbucket.Dead || f.state == vbucket.Unknown) && f.uuid == 0 {
		if t.reach == reachNoReply {
			return actWait, "source-without-history-wait"
		}
		return actUnresolved, "source-without-history"
	}
	// R4. The source is dead and holds every write it acknowledged; the
	// target is not active and cannot become so (settled here, or its
	// process is gone). One active again: the source.
	if f.reach == reachOK && !f.restarted && (f.state == vbucket.Dead || f.state == vbucket.Unknown) && !emptied {
		if t.lost() || t.reach == reachOK {
			return actReactivate, "R4"
		}
		return actWait, "R4-wait" // the target does not answer: it may be active
	}
	// R5. The source is gone. A target that kept the vbucket as a replica
	// had turned pending, so the handover had begun and it holds what
	// the source acknowledged before, or it was the vbucket's replica
	// before the move and holds what a replica holds: promote it. A fenced source
	// (Promote, a failover) serves nothing either, and the target is a
	// replica of it.
	if f.lost() || emptied {
		if t.reach == reachOK && !t.restarted && t.state == vbucket.Replica {
			return actPromote, "R5"
		}
		if t.reach == reachNoReply {
			return actWait, "R5-wait"
		}
		return actUnresolved, "source-and-copy-lost"
	}
	if f.reach == reachNoReply {
		return actWait, "source-silent" // it may come back active, or turn back active
	}
	// The source in replica or pending: not a state a move leaves.
	return actUnresolved, "unexpected-state"
}

// settle looks at both ends and applies decide, every Settle/50, until a
// rule acts or Settle runs out (then actUnresolved, the rule that was
// waiting suffixed "-timeout") or Options.Abandon says so (suffixed
// "-abandoned"). res.Rule and res.Detail are set. The error
// is non-nil only when Halt (or ctx) ended the wait; res.Outcome is then
// Unresolved. A fenced source (Promote) is not asked; the target's
// streams are then not looked at (Promote says why).
func (m *mover) settle(ctx context.Context, res *Result) (action, view, error) {
	deadline := time.Now().Add(m.opt.Settle)
	poll := max(m.opt.Settle/50, 20*time.Millisecond)
	lctx, lost := m.targetLost(ctx)
	defer lost()
	var f, t view
	var a action
	var rule string
	for {
		err := m.opt.halted()
		if err == nil && ctx.Err() != nil {
			err = fmt.Errorf("%w: %v", ErrHalted, ctx.Err())
		}
		if err != nil {
			res.Outcome = Unresolved
			res.Detail = fmt.Sprintf("source %s: %v; target %s: %v", m.from, f, m.to, t)
			return actUnresolved, t, fmt.Errorf("vbucket %d from %s to %s, recovery not decided: %w", m.vb, m.from, m.to, err)
		}
		if lctx.Err() != nil {
			a, rule = actUnresolved, "target-failing-over"
			break
		}
		if m.fenced {
			t = m.observe(lctx, m.to, m.toPID, "")
			f = view{reach: reachFenced}
		} else {
			t = m.observe(lctx, m.to, m.toPID, m.from)
			f = m.observe(ctx, m.from, m.fromPID, "")
		}
		if lctx.Err() != nil && t.reach != reachOK {
			// A look at the target cut short is no answer (never a
			// refusal, which R4 would take for a target gone): no
			// rule acts on the source alone then.
			t.reach = reachNoReply
		}
		a, rule = decide(f, t)
		if a != actWait {
			break
		}
		if lctx.Err() != nil {
			a, rule = actUnresolved, "target-failing-over"
			break
		}
		if takeoverWatch && m.opt.Abandon != nil && m.opt.Abandon() {
			// The caller is failing an end over: it settles the
			// vbucket, and the wait would only hold it up.
			a = actUnresolved
			rule += "-abandoned"
			break
		}
		if time.Now().After(deadline) {
			a = actUnresolved
			rule += "-timeout"
			break
		}
		time.Sleep(poll) // real nodes settle in real time; there is no clock to advance
	}
	res.Rule = rule
	res.Detail = fmt.Sprintf("source %s: %v; target %s: %v", m.from, f, m.to, t)
	m.opt.logf("recovery %s: %s", rule, res.Detail)
	return a, t, nil
}

// targetLost returns a context that ends with ctx, or once
// Options.TargetLost says the target is being failed over (asked every
// 50 ms by a goroutine that the returned func stops and waits for), and
// that func. Without TargetLost, or in a vbcache_unsafe_targetwait build,
// the context is ctx.
func (m *mover) targetLost(ctx context.Context) (context.Context, func()) {
	if m.opt.TargetLost == nil || targetWait {
		return ctx, func() {}
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // owned by targetLost's caller, which stops and waits for it
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for !m.opt.TargetLost() {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
		}
		cancel()
	}()
	return lctx, func() {
		cancel()
		<-done
	}
}

// recover applies the rules until one acts or Settle runs out.
func (m *mover) recover(res *Result) error {
	ctx := context.Background() // recovery must run even when the caller's ctx ended; Settle bounds it
	a, t, err := m.settle(ctx, res)
	if err != nil {
		return err
	}
	rule := res.Rule
	if a == actAborted || a == actReactivate || a == actPromote {
		if err := m.opt.halted(); err != nil {
			res.Outcome = Unresolved
			return fmt.Errorf("vbucket %d (%s): %s: %w", m.vb, rule, res.Detail, err)
		}
	}
	switch a {
	case actMoved:
		res.Outcome = Moved
		return m.finish(res, true /* deleteOld */)
	case actAborted:
		res.Outcome = Aborted
		m.dropTarget(ctx, res, t)
		return fmt.Errorf("%w: vbucket %d stays on %s: takeover: %v", ErrAborted, m.vb, m.from, res.TakeoverErr)
	case actReactivate:
		err := m.withConn(ctx, m.from, func(c *admin.Conn) error { return c.SetVBucket(m.vb, vbucket.Active) })
		if err != nil {
			res.Outcome = Unresolved
			return fmt.Errorf("%w: could not set vbucket %d active again on %s (%v); %s", ErrUnresolved, m.vb, m.from, err, res.Detail)
		}
		res.Outcome = Aborted
		m.dropTarget(ctx, res, t)
		return fmt.Errorf("%w: vbucket %d active again on %s: takeover: %v", ErrAborted, m.vb, m.from, res.TakeoverErr)
	case actPromote:
		err := m.withConn(ctx, m.to, func(c *admin.Conn) error { return c.SetVBucket(m.vb, vbucket.Active) })
		if err != nil {
			res.Outcome = Unresolved
			return fmt.Errorf("%w: source lost and promoting %s failed (%v); %s", ErrUnresolved, m.to, err, res.Detail)
		}
		res.Outcome = Promoted
		return m.finish(res, false /* deleteOld: its node is gone */)
	}
	res.Outcome = Unresolved
	return fmt.Errorf("%w: vbucket %d (%s): %s; takeover: %v", ErrUnresolved, m.vb, rule, res.Detail, res.TakeoverErr)
}

// dropTarget deletes the target's partial copy after an abort, when the
// target answered, is settled and holds one (a replica; a pending target
// is never settled). A target that was the vbucket's replica at
// preflight is the vbucket's replica again instead, fed from the source,
// which is active. A target replicating from the source is that replica
// (Recover knows no preflight): its copy is kept.
func (m *mover) dropTarget(ctx context.Context, res *Result, t view) {
	if t.reach != reachOK || t.state != vbucket.Replica || t.streaming || t.fed {
		return
	}
	if m.toWasReplica {
		err := m.withConn(ctx, m.to, func(c *admin.Conn) error { return c.Replicate(m.vb, m.from) })
		res.TargetRefed = err == nil
		if err != nil {
			m.opt.logf("could not feed the replica on %s from %s again: %v", m.to, m.from, err)
		}
		return
	}
	err := m.withConn(ctx, m.to, func(c *admin.Conn) error { return c.DelVBucket(m.vb) })
	res.TargetCopyDropped = err == nil
	if err != nil {
		m.opt.logf("could not drop the partial copy on %s: %v", m.to, err)
	}
}
