package proxy

import (
	"encoding/binary"
	"net"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/memcache"
)

// # A cluster on the loops
//
// Over a cluster the loops route each key by the upstream's map
// (upstream.route): to the active node of the key's vbucket, over the
// loop's connections to that node, which are kept by the node's name
// across maps, so a new map opens connections only to new nodes. A text
// or meta request goes to the node in text (the node hashes the key to
// its vbucket, as DESIGN.md says), a binary one in binary with the
// vbucket id in its header. A get's keys are grouped by node; a node
// refuses a multi-key get as a whole, so a refused group goes again as
// a whole.
//
// A request keeps what it needs to be sent again (lreq.sent, or a get's
// verb and keys) until it is answered, and goes again, after the upstream
// is asked for a fresh map (wantMap) and a backoff of 10 ms doubling to
// 200 ms, up to ClusterConfig.RetryTimeout after it started, when a node
// refuses it (NOT_MY_VBUCKET, whose binary body is a map, or TMPFAIL;
// text: "SERVER_ERROR not my vbucket", "SERVER_ERROR temporary
// failure"), when its node cannot be reached, or when the map names no
// node for its vbucket. Issue 21's rule for writes holds: a write
// (anything but get, gets, gat, gats, touch and mg, and their binary
// kin) whose node failed after it was sent (a timeout, a connection lost)
// may have been applied there, and is answered with SERVER_ERROR; only
// a refusal or a failed connect proves it was not, and only then does
// it go again. A request's retries are in the loop's retries list,
// which the loop runs each round and whose earliest time bounds its
// park. A request whose retries run out is answered with
// "SERVER_ERROR proxy upstream <node>: <reason>". Answers still go to the
// client in request order: a request waiting for a retry holds the
// replies of those after it.

const (
	retryMin = 10 * time.Millisecond
	retryMax = 200 * time.Millisecond
)

// lretry is a request (or a get's keys r.order[lo:hi]) waiting to be
// sent again. It holds one of r.frags.
type lretry struct {
	r      *lreq
	lo, hi int32
	due    time.Time
}

// syncRoute makes the loop's server table follow the upstream's map. It
// reports false when there is no map yet.
func (l *ploop) syncRoute() bool {
	rt := l.gen.route.Load()
	if rt == nil {
		return false
	}
	if rt != l.rt {
		l.rt = rt
		l.rtUp = l.rtUp[:0]
		if l.addrs == nil {
			l.addrs = make(map[string]net.Addr)
		}
		for _, s := range rt.VBucketServerMap.ServerList {
			a := l.addrs[s]
			if a == nil {
				a = memcache.NewAddr(s)
				l.addrs[s] = a
			}
			l.rtUp = append(l.rtUp, a)
		}
	}
	return true
}

// route returns the loop's connection for c to the active node of key's
// vbucket, and the vbucket; nil when the map names none.
func (l *ploop) route(c *conn, key []byte) (*lup, int) {
	if !l.syncRoute() {
		return nil, 0
	}
	vb := vbmap.VBucket(key, l.rt.NumVBuckets())
	i := l.rt.Active(vb)
	if i < 0 || i >= len(l.rtUp) {
		return nil, vb
	}
	return l.pickAddr(c, l.rtUp[i]), vb
}

// sendOne sends a one-node request of a cluster (r.sent, for the key
// r.kb) to its node, or queues it for a retry.
func (l *ploop) sendOne(r *lreq) {
	up, vb := l.route(r.c, r.kb)
	if up == nil {
		r.frags++
		l.retryLater(r, 0, 0, "cluster", memcache.ErrNoServers)
		return
	}
	at := len(up.wbuf)
	up.wbuf = append(up.wbuf, r.sent...)
	if r.bin {
		binary.BigEndian.PutUint16(up.wbuf[at+6:], uint16(vb))
	}
	l.push(up, r, 0, 0)
}

// sendGet sends a cluster get's keys r.order[lo:hi], grouped by node,
// each group after the get's verb (r.verb), or queues them for a retry.
func (l *ploop) sendGet(r *lreq, lo, hi int32) {
	r.srv = r.srv[:0]
	for j := lo; j < hi; j++ {
		up, _ := l.route(r.c, r.key(int(r.order[j])))
		if up == nil {
			r.frags++
			l.retryLater(r, lo, hi, "cluster", memcache.ErrNoServers)
			return
		}
		r.srv = append(r.srv, up)
	}
	for i, up := range r.srv {
		if up == nil {
			continue // taken by an earlier node's group
		}
		from := int32(len(r.order))
		up.wbuf = append(up.wbuf, r.verb...)
		for j := i; j < len(r.srv); j++ {
			if r.srv[j] != up {
				continue
			}
			r.srv[j] = nil
			k := r.order[lo+int32(j)]
			r.order = append(r.order, k)
			up.wbuf = append(up.wbuf, ' ')
			up.wbuf = append(up.wbuf, r.key(int(k))...)
		}
		up.wbuf = append(up.wbuf, '\r', '\n')
		l.push(up, r, from, int32(len(r.order)))
	}
}

// retryLater queues r (a get: its keys r.order[lo:hi]) to go again after
// a backoff, or answers it with the failure why from addr when its time
// is up or its client has gone. The caller has counted it in r.frags.
func (l *ploop) retryLater(r *lreq, lo, hi int32, addr string, why error) {
	back := retryMin << min(r.tries, 5)
	back = min(back, retryMax)
	r.tries++
	u := l.gen
	if r.c == nil || l.now.Sub(r.born)+back > u.retry {
		if r.c != nil {
			r.fail(failReplyAddr(addr, why)) // allocates: rare
		}
		l.unhold(r)
		return
	}
	u.wantMap()
	l.retries = append(l.retries, lretry{r: r, lo: lo, hi: hi, due: l.now.Add(back)})
}

// unhold drops one of r.frags that no server connection holds (a retry
// that ends); the last one finishes r.
func (l *ploop) unhold(r *lreq) {
	r.frags--
	if r.frags == 0 {
		l.finish(r)
	}
}

// runRetries sends again the requests whose backoff is over.
func (l *ploop) runRetries() {
	rs := l.retries
	l.retries = l.retries2[:0]
	for _, e := range rs {
		if e.due.After(l.now) {
			l.retries = append(l.retries, e)
			continue
		}
		r := e.r
		switch {
		case r.c == nil: // its client has gone
			l.unhold(r)
		case !l.gen.cluster: // reloaded onto a pool
			r.fail("SERVER_ERROR proxy upstream: reloaded during a retry")
			l.unhold(r)
		case len(r.sent) > 0:
			r.frags--
			l.sendOne(r)
		default:
			r.frags--
			l.sendGet(r, e.lo, e.hi)
		}
	}
	clear(rs)
	l.retries2 = rs[:0]
}

// firstRetry is the earliest time a retry is due, zero if none.
func (l *ploop) firstRetry() time.Time {
	var d time.Time
	for _, e := range l.retries {
		if d.IsZero() || e.due.Before(d) {
			d = e.due
		}
	}
	return d
}

// refused is up's answer of NOT_MY_VBUCKET or TMPFAIL to the fragment f
// at the head of its queue: f's request (or keys) goes again.
func (l *ploop) refused(up *lup, f *lfrag, why error) {
	r, lo, hi := f.r, f.lo, f.hi
	l.dequeue(up, f)
	l.inflight--
	l.retryLater(r, lo, hi, up.addr.String(), why)
	l.closeIfDone(up)
}

// resendable reports whether a cluster's request that failed with err
// (not an answer) may go again: a read always, a write only when it
// certainly was not applied.
func resendable(write bool, err error) bool {
	return !write || notApplied(err)
}

// refusal reports whether a node's text answer line (without "\r\n")
// is a refusal a retry may cure, and which.
func refusal(line []byte) error {
	switch string(line) {
	case "SERVER_ERROR not my vbucket":
		return memcache.ErrNotMyVBucket
	case "SERVER_ERROR temporary failure":
		return memcache.ErrTemporaryFailure
	}
	return nil
}

// refusalBin is refusal for a binary status.
func refusalBin(s protocol.Status) error {
	switch s {
	case protocol.StatusNotMyVBucket:
		return memcache.ErrNotMyVBucket
	case protocol.StatusTmpFail:
		return memcache.ErrTemporaryFailure
	}
	return nil
}

// clusterWrite reports whether a request must not be sent twice unless
// it certainly was not applied (see the file comment).
func clusterWrite(cmd protocol.Cmd) bool {
	switch cmd {
	case protocol.CmdGet, protocol.CmdGets, protocol.CmdGat, protocol.CmdGats, protocol.CmdTouch, protocol.CmdMetaGet:
		return false
	}
	return true
}

// clusterWriteBin is clusterWrite for a binary opcode (loud).
func clusterWriteBin(op protocol.Opcode) bool {
	switch op {
	case protocol.OpGet, protocol.OpGetK, protocol.OpGAT, protocol.OpGATK, protocol.OpTouch:
		return false
	}
	return true
}
