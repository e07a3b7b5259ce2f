package server

import (
	"strconv"

	"github.com/vbcache/vbcache/internal/protocol"
)

// Terms: a manager's requests carry its leadership's term, a number that
// only grows from one leadership to the next (the creation revision of
// its election key in etcd, internal/manager). A leader paused past its
// etcd session, or cut off from it, can run again and send what it
// decided before its successor took over: setting active a vbucket the
// successor has moved, or granting a lease the successor does not know
// of. So a node keeps the newest term it has seen and refuses a request
// of an older one:
//
//   - SET_VBUCKET, DEL_VBUCKET, TAKEOVER, REPLICATE, STOP_REPLICATION and
//     SET_CLUSTER_CONFIG carry it in the request header's CAS field
//     (internal/admin, Conn.Term); an older term is answered
//     KEY_EEXISTS with "stale term N: the newest seen here is M" and
//     changes nothing;
//   - a lease grant carries it as its epoch; a grant of an older term is
//     refused the same way, and extends nothing.
//
// Term 0 is a request from no leader (an operator's `vbcache ctl`, a
// test): it is served, and moves nothing. Random leadership epochs, as
// grants had before, could not be ordered; a cluster whose etcd is made
// anew (its election revisions starting again) must restart its nodes
// too.
//
// The build tag vbcache_unsafe_terms serves every term (terms false), so
// that tests can show they catch a deposed leader's requests.

// acceptTerm records t as seen and reports whether a request of term t
// may be served: t is 0 or no older than the newest term seen.
func (cl *cluster) acceptTerm(t uint64) bool {
	if t == 0 || !terms {
		return true
	}
	for {
		cur := cl.term.Load()
		if t < cur {
			cl.termRefused.Add(1)
			return false
		}
		if t == cur || cl.term.CompareAndSwap(cur, t) {
			return true
		}
	}
}

// refuseTerm answers a request of a stale term t.
func (c *conn) refuseTerm(t uint64) {
	msg := "stale term " + strconv.FormatUint(t, 10) + ": the newest seen here is " + strconv.FormatUint(c.s.cl.term.Load(), 10)
	c.out = protocol.AppendResponse(c.out, c.bh.Opcode, protocol.StatusKeyExists, c.bh.Opaque, 0, nil, nil, []byte(msg))
}

// termOp reports whether op carries the term in its CAS field.
func termOp(op protocol.Opcode) bool {
	return managerOp(op) && op != protocol.OpGetVBucket && op != protocol.OpLease
}
