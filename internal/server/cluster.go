package server

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/stream"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// Cluster mode (Config.VBuckets > 0). The node keeps a vbucket.Table and
// checks every key command against it before it touches the store:
//
//   - binary requests by the vbucket id in the header (bytes 6-7);
//   - text and meta requests, which carry no vbucket, by hashing the key
//     with vbmap.VBucket.
//
// active is served. replica, dead, unknown and out-of-range vbuckets are
// refused: binary with NOT_MY_VBUCKET (0x07) whose body is the stored
// cluster config JSON (empty when there is none), text with
// "SERVER_ERROR not my vbucket". A pending vbucket parks the request on the
// connection's goroutine (vbucket.Table.Wait) for at most
// Config.VBucketParkTimeout; the connection first writes the replies it
// already holds. When the state changes the request is served or refused
// by the new state; on timeout it is answered with TMPFAIL (0x86,
// "Temporary failure") in binary and "SERVER_ERROR temporary failure" in
// text, so the client may retry.
//
// The vbucket check comes before the per-opcode argument checks: a
// malformed request for a vbucket the node does not own gets
// NOT_MY_VBUCKET rather than "Invalid arguments".
//
// A multi-key text get is refused as a whole, before any key is served,
// when one of its keys is not in an active vbucket.
//
// In standalone mode (VBuckets 0) none of this runs: the vbucket,
// cluster-config and bootstrap (bootstrap.go) opcodes answer "Unknown
// command" as memcached does.

// clusterConfig is a stored cluster map: the JSON as received and the
// (revEpoch, rev) it is ordered by.
type clusterConfig struct {
	json     []byte
	revEpoch int64
	rev      int64
	replicas []bool        // per vbucket: whether the map gives it a replica
	parsed   *vbmap.Config // json parsed, for takeView when the node's manager lease ends (lease.go)
}

// newerThan reports whether cc is newer than (epoch, rev).
func (cc *clusterConfig) newerThan(epoch, rev int64) bool {
	if cc.revEpoch != epoch {
		return cc.revEpoch > epoch
	}
	return cc.rev > rev
}

// olderThan reports whether (epoch, rev) is newer than cc; a nil cc is
// older than any config.
func (cc *clusterConfig) olderThan(epoch, rev int64) bool {
	if cc == nil {
		return epoch > 0 || rev > 0
	}
	if cc.revEpoch != epoch {
		return cc.revEpoch < epoch
	}
	return cc.rev < rev
}

// cluster is the cluster-mode state of a Server; nil when standalone.
type cluster struct {
	vbs *vbucket.Table

	// incarnation is random and nonzero, chosen when the cluster state
	// is made (at process start), and sent in LEASE's answer: a node
	// restarted at the same address answers with another (lease.go).
	incarnation uint64

	lease nodeLease // lease.go

	cfgMu  sync.Mutex                    // serialises SET_CLUSTER_CONFIG's compare and store; the reply and Poke come after it
	config atomic.Pointer[clusterConfig] // read without a lock

	// parkCtx ends when the server shuts down, so parked requests let go
	// at once instead of holding Serve for the park timeout (and the lease
	// loop and its peer questions end). It is the
	// server's lifetime context (like http.Server's BaseContext), not a
	// request's.
	parkCtx  context.Context
	parkStop context.CancelFunc

	streams *stream.Node // mutation log, producers and consumers

	controlRefused atomic.Uint64 // control requests refused for want of the admin role (stats control_refused)
	term           atomic.Uint64 // the newest leader's term seen (terms.go)
	termRefused    atomic.Uint64 // requests refused for a stale term (stats vbucket term_refused)

	ops     []atomic.Uint64 // key requests served, per vbucket
	refused []atomic.Uint64 // key requests answered NOT_MY_VBUCKET, per vbucket

	// Synchronous replication (Config.SyncReplication): writes that
	// waited for their vbucket's streams, and those whose wait ran out.
	syncWaits, syncTimeouts atomic.Uint64
	// syncDone is, per vbucket, a sequence number its streams are known
	// to have acknowledged, with the log's generation it belongs to
	// (syncMark): a command under synchronous replication waits only
	// while its vbucket's last mutation is above it. Allocated with
	// Config.SyncReplication.
	syncDone []atomic.Uint64
	// syncReadWaits and syncReadTimeouts count the reads that waited for
	// their vbucket's writes to be replicated, and those whose wait ran
	// out (answered as unsure).
	syncReadWaits, syncReadTimeouts atomic.Uint64
}

func newCluster(cfg *Config) *cluster {
	cl := &cluster{vbs: vbucket.NewTable(cfg.VBuckets),
		ops: make([]atomic.Uint64, cfg.VBuckets), refused: make([]atomic.Uint64, cfg.VBuckets)}
	if cfg.SyncReplication {
		cl.syncDone = make([]atomic.Uint64, cfg.VBuckets)
	}
	cl.parkCtx, cl.parkStop = context.WithCancel(context.Background())
	cl.lease.kick = make(chan struct{}, 1)
	for cl.incarnation == 0 {
		cl.incarnation = rand.Uint64()
	}
	return cl
}

// configJSON returns the stored config JSON, or nil.
func (cl *cluster) configJSON() []byte {
	if cc := cl.config.Load(); cc != nil {
		return cc.json
	}
	return nil
}

// maxClusterConfig bounds a SET_CLUSTER_CONFIG body for a node of n
// vbuckets: room for a map and a forward map of up to four copies of each
// vbucket (under 32 bytes a vbucket each) and for the server list, and not
// much more, as memcached bounds a request by what it can be. A config of
// four nodes with 1024 vbuckets, one replica and a forward map is 12 KiB
// (the bound 128 KiB); with 65536 vbuckets and three replicas 1.3 MiB
// (the bound 4.1 MiB). The body is input memory under -m (input.go).
func maxClusterConfig(n int) int { return 64<<10 + 64*n }

// admission is the outcome of the vbucket check.
type admission uint8

const (
	admitServe   admission = iota // active: serve
	admitRefuse                   // not ours: NOT_MY_VBUCKET
	admitTimeout                  // still pending after the park timeout
	admitNoLease                  // active, but the node holds no lease (lease.go): TMPFAIL
)

// admit checks vb for a key request, parking while it is pending. A
// request it serves is counted in the vbucket (vbucket.Table.Enter) until
// the command ends (leaveVB), so that a takeover can fence writes.
func (c *conn) admit(vb int) admission {
	cl := c.s.cl
	c.leaveVB()
	if vb >= cl.vbs.Len() {
		cl.countRefused(vb)
		return admitRefuse
	}
	st := cl.vbs.Enter(vb)
	if st == vbucket.Pending {
		c.mayBlock()
		// Replies already computed go out before the connection blocks.
		if c.flush() != nil {
			c.close = true
		}
		d := c.s.cfg.VBucketParkTimeout
		if d <= 0 {
			d = DefaultVBucketParkTimeout
		}
		ctx, cancel := context.WithTimeout(cl.parkCtx, d)
		if st = cl.vbs.Wait(ctx, vb); st == vbucket.Active {
			st = cl.vbs.Enter(vb)
		}
		cancel()
		c.leaseRead = false // time has passed: read the clock again
	}
	switch st {
	case vbucket.Active:
		if cl.lease.on.Load() && !cl.lease.serving(c.leaseClock()) {
			cl.vbs.Leave(vb)
			return c.noLease()
		}
		c.entered = vb + 1
		c.mutsAtAdmit = c.tx.Mutations()
		c.outAtAdmit = len(c.out)
		cl.ops[vb].Add(1)
		// Items this request stores belong to vb (the store keeps each
		// vbucket's items on a list, for DEL_VBUCKET).
		c.tx.SetVBucket(uint16(vb))
		return admitServe
	case vbucket.Pending:
		return admitTimeout
	}
	cl.countRefused(vb)
	return admitRefuse
}

// leaveVB ends the vbucket admission of the command that just finished.
// With synchronous replication, a command that changed its vbucket then
// waits until the vbucket's streams have acknowledged the change (its
// reply is in c.out, not yet written), at most the park timeout, and is
// answered with an error when they did not (syncWriteAmbiguous): a
// failover that promotes a replica then keeps every write a client saw
// acknowledged. The wait comes after Leave, so a takeover fencing writes
// does not wait for it.
//
// A read waits too (syncReads): what it returns may be a write that no
// replica has yet, which a failover would undo, so a client could see a
// value and then its absence. A read (text, meta or binary) that found
// a value waits while its key's last write (Log.KeySeq) is not
// acknowledged by the streams; that is rare and short where nothing is
// being written (a per-vbucket atomic marks what is known replicated, at
// the cost of one load), and a read whose wait runs out is answered with
// a refusal (syncReadUnsure).
func (c *conn) leaveVB() {
	if c.entered == 0 {
		return
	}
	vb := c.entered - 1
	cl := c.s.cl
	cl.vbs.Leave(vb)
	c.entered = 0
	if !c.s.cfg.SyncReplication {
		return
	}
	if c.tx.Mutations() != c.mutsAtAdmit {
		if !c.syncWait(vb, nil, true) {
			c.syncWriteAmbiguous()
		}
		return
	}
	if !syncReads || c.readsChecked {
		return
	}
	var key []byte
	if c.syncKeyOK {
		key = c.syncKey
	}
	if !c.syncWait(vb, key, false) {
		c.syncReadUnsure(c.outAtAdmit)
	}
}

// syncWait waits, at most the park timeout, until vb's streams have
// acknowledged its last mutation, or, for a read of key (nil: any key),
// key's last mutation, and reports whether they did. Every sequence
// number up to the vbucket's last was handed out before it looks, a
// write's own and, for a read, that of the write it read.
func (c *conn) syncWait(vb int, key []byte, wrote bool) bool {
	cl := c.s.cl
	seq, gen := cl.streams.Log.HighGen(vb)
	done := &cl.syncDone[vb]
	mark := done.Load()
	if syncMarked(mark, seq, gen) {
		return true
	}
	if key != nil {
		// A read waits for its key's last write only, not for every
		// write of its vbucket: the ring says which that is.
		floor, ok := syncMarkedUpTo(mark, gen)
		if !ok {
			floor = 0
		}
		if seq = cl.streams.Log.KeySeq(vb, key, gen, floor); syncMarked(mark, seq, gen) {
			return true
		}
	}
	want := func() int { return cl.replicasWanted(vb) }
	outside := func(name string) bool { return cl.outsideRow(vb, name) }
	if cl.streams.Replicated(vb, seq, want(), outside) {
		raise(done, seq, gen)
		return true
	}
	if wrote {
		cl.syncWaits.Add(1)
	} else {
		cl.syncReadWaits.Add(1)
	}
	c.mayBlock()
	d := c.s.cfg.VBucketParkTimeout
	if d <= 0 {
		d = DefaultVBucketParkTimeout
	}
	ctx, cancel := context.WithTimeout(cl.parkCtx, d)
	defer cancel()
	c.leaseRead = false // time will have passed: the next check reads the clock again
	if cl.streams.WaitReplicated(ctx, vb, seq, want, outside) {
		raise(done, seq, gen)
		return true
	}
	if wrote {
		cl.syncTimeouts.Add(1)
	} else {
		cl.syncReadTimeouts.Add(1)
	}
	return false
}

// A sync mark packs a log generation (its low 16 bits) above a sequence
// number (48 bits): a mark of another generation marks nothing, since a
// reset history numbers its mutations again from its snapshot's end.
const syncSeqBits = 48

// syncMarked reports whether mark says seq of generation gen is
// replicated.
func syncMarked(mark, seq, gen uint64) bool {
	upTo, ok := syncMarkedUpTo(mark, gen)
	return ok && seq <= upTo
}

// syncMarkedUpTo is the sequence number up to which mark says generation
// gen is replicated; ok is false when mark is of another generation.
func syncMarkedUpTo(mark, gen uint64) (upTo uint64, ok bool) {
	return mark & (1<<syncSeqBits - 1), mark>>syncSeqBits == gen&(1<<(64-syncSeqBits)-1)
}

// raise marks seq of generation gen replicated in a, unless a already
// marks a later one of that generation.
func raise(a *atomic.Uint64, seq, gen uint64) {
	if seq >= 1<<syncSeqBits {
		return // never in practice; unmarked only costs a look at the streams
	}
	for {
		cur := a.Load()
		if syncMarked(cur, seq, gen) {
			return
		}
		next := gen&(1<<(64-syncSeqBits)-1)<<syncSeqBits | seq
		if a.CompareAndSwap(cur, next) {
			return
		}
	}
}

// syncReadUnsure replaces the reply of a read, from at, whose key's last
// write was not confirmed replicated within the park timeout: the value
// it read might not survive a failover. A text or meta command answers
// "SERVER_ERROR temporary failure", a binary one TMPFAIL: refusals that a
// proxy and a vbucket client send again (a miss would say the key is
// absent, and a failover may well keep it). A classic multi-get does the
// same in its own loop (classic.go).
func (c *conn) syncReadUnsure(at int) {
	if at > len(c.out) {
		return
	}
	c.out = c.out[:at]
	if c.mode == modeBinary {
		c.binError(protocol.StatusTmpFail)
		return
	}
	c.out = append(c.out, "SERVER_ERROR temporary failure\r\n"...)
}

// syncWriteAmbiguous replaces the reply of a write whose replication was
// not confirmed within the park timeout: it is stored here, but a
// failover could lose it, so it is not acknowledged (Couchbase's
// SyncWriteAmbiguous; text: SERVER_ERROR). A quiet binary request gets
// the error too; a text command with noreply gets nothing, as memcached
// silences its errors.
func (c *conn) syncWriteAmbiguous() {
	if c.outAtAdmit > len(c.out) {
		return // not this command's reply (cannot happen: c.out only grows within a command)
	}
	c.out = c.out[:c.outAtAdmit]
	switch {
	case c.mode == modeBinary:
		c.binError(protocol.StatusSyncWriteAmbiguous)
	case !c.noreply:
		c.out = append(c.out, "SERVER_ERROR sync replication timed out; the write may not survive a failover\r\n"...)
	}
}

// replicasWanted is how many streams must copy a write to vbucket vb
// before --sync-replication answers it: one when the stored map gives vb
// a replica, so a write does not go unreplicated in the moments a
// replica's stream is not open (a new active after a move, a replica
// rebuilding), none when it gives none or there is no map. One is a
// majority of two or three copies, and in a chain the active feeds only
// the first replica.
func (cl *cluster) replicasWanted(vb int) int {
	if cc := cl.config.Load(); cc != nil && vb < len(cc.replicas) && cc.replicas[vb] {
		return 1
	}
	return 0
}

// clusterName is the name the cluster's map knows this node by, for its
// consumers' OPEN (stream.Node.ClusterName): the name its manager's lease
// grants give it, or, before any, its listening address when the stored
// map names it so; "" when neither says.
func (cl *cluster) clusterName() string {
	if self, _ := cl.lease.members(); self != "" {
		return self
	}
	if cc := cl.config.Load(); cc != nil && cc.parsed != nil && slices.Contains(cc.parsed.VBucketServerMap.ServerList, cl.streams.Name) {
		return cl.streams.Name
	}
	return ""
}

// outsideRow reports whether the stored map names node (as the map names
// it) in neither vb's row nor its forward row: a replica failed over, or
// moved away, whose stream may still be open (a paused node keeps its
// connection). Without a map, nothing is outside.
func (cl *cluster) outsideRow(vb int, node string) bool {
	cc := cl.config.Load()
	if cc == nil || cc.parsed == nil {
		return false
	}
	m := &cc.parsed.VBucketServerMap
	for _, rows := range [][][]int{m.VBucketMap, m.VBucketMapForward} {
		if vb >= len(rows) {
			continue
		}
		for _, i := range rows[vb] {
			if i >= 0 && i < len(m.ServerList) && m.ServerList[i] == node {
				return false
			}
		}
	}
	return true
}

// countRefused counts a request refused with NOT_MY_VBUCKET.
func (cl *cluster) countRefused(vb int) {
	if vb >= 0 && vb < len(cl.refused) {
		cl.refused[vb].Add(1)
	}
}

// textAdmit checks a text or meta key in cluster mode; when the key may not
// be served it replies (through say) and returns false.
func (c *conn) textAdmit(key []byte, say func(string)) bool {
	cl := c.s.cl
	if cl == nil {
		return true
	}
	c.leaveVB() // the previous key's, before this key is noted
	if c.s.cfg.SyncReplication {
		c.syncKey, c.syncKeyOK = append(c.syncKey[:0], key...), true
	}
	switch c.admit(vbmap.VBucket(key, cl.vbs.Len())) {
	case admitServe:
		return true
	case admitTimeout, admitNoLease:
		say("SERVER_ERROR temporary failure")
	default:
		say("SERVER_ERROR not my vbucket")
	}
	return false
}

// textOwnedNow is textAdmit for a key in the middle of a multi-get, where
// parking is not possible (replies for earlier keys are held): unless the
// key's vbucket is active, it drops this command's replies, answers the
// error and returns false.
func (c *conn) textOwnedNow(key []byte) bool {
	vbs := c.s.cl.vbs
	st := vbs.Get(vbmap.VBucket(key, vbs.Len()))
	leased := !c.s.cl.lease.on.Load() || c.s.cl.lease.serving(c.leaseClock())
	if st == vbucket.Active && leased {
		return true
	}
	c.out = c.out[:c.mark]
	if st == vbucket.Pending || st == vbucket.Active {
		c.reply("SERVER_ERROR temporary failure")
	} else {
		c.reply("SERVER_ERROR not my vbucket")
	}
	return false
}

// binNotMyVBucket appends NOT_MY_VBUCKET with the config JSON as body.
func (c *conn) binNotMyVBucket() {
	c.out = protocol.AppendResponse(c.out, c.bh.Opcode, protocol.StatusNotMyVBucket, c.bh.Opaque, 0, nil, nil, c.s.cl.configJSON())
}

// isKeyOp reports whether op (loud form) is a key command checked against
// the vbucket table.
func isKeyOp(op protocol.Opcode) bool {
	switch op {
	case protocol.OpGet, protocol.OpGetK, protocol.OpTouch, protocol.OpGAT, protocol.OpGATK,
		protocol.OpSet, protocol.OpAdd, protocol.OpReplace, protocol.OpAppend, protocol.OpPrepend,
		protocol.OpDelete, protocol.OpIncrement, protocol.OpDecrement:
		return true
	}
	return false
}

// managerOp reports whether op is one a manager sends a node (see
// Config.CutControl).
func managerOp(op protocol.Opcode) bool {
	switch op {
	case protocol.OpLease, protocol.OpSetVBucket, protocol.OpGetVBucket, protocol.OpDelVBucket, protocol.OpSetClusterConfig,
		stream.OpTakeover, stream.OpReplicate, stream.OpStopReplication:
		return true
	}
	return false
}

// controlOp reports whether op is a cluster-control request: one that
// changes or reveals what the node owns (vbucket states, the map it hands
// clients, leases, moves and replication, and the streams that copy its
// data). Only a connection logged in as the cluster administrator may send
// them (Config.ClusterAuth), or anyone with --insecure-cluster. The
// stream requests after OPEN reach the producer only on a connection whose
// OPEN was served; they are listed so that the list is the whole set
// docs/OPERATIONS.md gives.
func controlOp(op protocol.Opcode) bool {
	switch op {
	case protocol.OpLeaseQuery, stream.OpOpen, stream.OpCloseStream, stream.OpStreamReq, stream.OpBufferAck, stream.OpSeqnoAck:
		return true
	}
	return managerOp(op)
}

// binCluster handles, in cluster mode, the vbucket check of key commands
// and the cluster opcodes. It reports handled false when the request is to
// be dispatched as usual; otherwise used and need are binaryPacket's.
func (c *conn) binCluster(op protocol.Opcode, extras, key, rest []byte, vlen, hk int) (used, need int, handled bool) {
	cl := c.s.cl
	vb := int(c.bh.VBucket)
	skip := func() (int, int, bool) {
		c.swallowData(vlen, rest)
		return hk + min(max(vlen, 0), len(rest)), 0, true
	}
	if cut := c.s.cfg.CutControl; cut != nil && cut.Load() && managerOp(op) {
		c.close = true // the "cut link": no answer, the connection ends
		return skip()
	}
	if controlOp(op) && !c.admin && !c.s.cfg.InsecureCluster {
		// memcached's answer to a request that needs a login the
		// connection does not have; the connection stays open for the
		// data requests it may send.
		c.s.cl.controlRefused.Add(1)
		c.binError(protocol.StatusAuthError)
		return skip()
	}
	if termOp(op) && !cl.acceptTerm(c.bh.CAS) {
		c.refuseTerm(c.bh.CAS)
		return skip()
	}
	switch {
	case isKeyOp(op):
		c.leaveVB()
		if c.s.cfg.SyncReplication {
			// A read waits for its key's last write (leaveVB). key is
			// the request's whole key: binaryPacket has it in hand.
			c.syncKey, c.syncKeyOK = append(c.syncKey[:0], key...), true
		}
		switch c.admit(vb) {
		case admitServe:
			return 0, 0, false
		case admitTimeout:
			c.binError(protocol.StatusTmpFail)
		case admitNoLease:
			c.out = protocol.AppendResponse(c.out, c.bh.Opcode, protocol.StatusTmpFail, c.bh.Opaque, 0, nil, nil, cl.configJSON())
		default:
			c.binNotMyVBucket()
		}
		return skip()
	case op == protocol.OpGetReplica:
		if cl.vbs.Get(vb) != vbucket.Replica {
			c.binNotMyVBucket()
			return skip()
		}
		if len(extras) != 0 || len(key) == 0 || vlen != 0 {
			c.binError(protocol.StatusInvalid)
			return skip()
		}
		c.binGet(protocol.OpGet, nil, key)
		return hk, 0, true
	case op == protocol.OpSetVBucket:
		var st vbucket.State
		switch len(extras) {
		case 1:
			st = vbucket.State(extras[0])
		case 4: // the legacy form: a big-endian uint32
			v := binary.BigEndian.Uint32(extras)
			if v > 0xff {
				v = 0 // invalid
			}
			st = vbucket.State(v)
		}
		if !st.Valid() || len(key) != 0 {
			c.binError(protocol.StatusInvalid)
			return skip()
		}
		if vb >= cl.vbs.Len() {
			c.binNotMyVBucket()
			return skip()
		}
		// An operator's state change overrides a takeover running here
		// or from here (waiting for it to stop).
		c.mayBlock()
		cl.streams.AbortTakeover(vb)
		cl.streams.EndTakeoverFrom(vb)
		if st != vbucket.Replica {
			// A replica promoted (or dropped) stops following its source.
			cl.streams.StopReplication(vb)
		}
		if st == vbucket.Active && cl.vbs.Get(vb) != vbucket.Active {
			// Another active may have written past this copy (a replica
			// promoted at a failover): its history branches here, before
			// it takes a write of its own (DESIGN.md §5).
			cl.streams.NewBranch(vb)
		}
		if _, err := cl.vbs.Set(vb, st); err != nil {
			// Unreachable: state and range were checked above.
			c.binError(protocol.StatusInvalid)
			return skip()
		}
		c.binOK(0, nil, nil, nil)
		return skip()
	case op == protocol.OpGetVBucket:
		if len(extras) != 0 || len(key) != 0 {
			c.binError(protocol.StatusInvalid)
			return skip()
		}
		if vb >= cl.vbs.Len() {
			c.binNotMyVBucket()
			return skip()
		}
		var v [4]byte
		binary.BigEndian.PutUint32(v[:], uint32(cl.vbs.Get(vb)))
		c.binOK(0, nil, nil, v[:])
		return skip()
	case op == protocol.OpDelVBucket:
		if len(extras) != 0 || len(key) != 0 {
			c.binError(protocol.StatusInvalid)
			return skip()
		}
		if vb >= cl.vbs.Len() {
			c.binNotMyVBucket()
			return skip()
		}
		// Dead first, so no new item lands in vb, then drop its items
		// from the store's list for vb: time in proportion to the
		// vbucket, never a scan.
		c.mayBlock()
		cl.streams.AbortTakeover(vb)
		cl.streams.EndTakeoverFrom(vb)
		cl.streams.StopReplication(vb)
		if _, err := cl.vbs.Set(vb, vbucket.Dead); err != nil {
			c.binError(protocol.StatusInvalid)
			return skip()
		}
		c.s.store.DropVBucket(vb)
		cl.streams.Forget(vb)
		c.binOK(0, nil, nil, nil)
		return skip()
	case op == protocol.OpSetClusterConfig:
		if vlen < 0 || vlen > maxClusterConfig(cl.vbs.Len()) {
			c.binError(protocol.StatusTooLarge)
			return skip()
		}
		if len(rest) < vlen {
			return 0, hk + vlen, true
		}
		c.setClusterConfig(extras, rest[:vlen])
		return hk + vlen, 0, true
	case op == protocol.OpLease:
		if vlen < 0 || vlen > maxLeaseQuorum {
			c.binError(protocol.StatusTooLarge)
			return skip()
		}
		if len(rest) < vlen {
			return 0, hk + vlen, true
		}
		c.grantLease(extras, key, rest[:vlen])
		return hk + vlen, 0, true
	case op == protocol.OpLeaseQuery:
		c.queryLease()
		return skip()
	case op == protocol.OpGetClusterConfig:
		c.getClusterConfig(extras)
		return skip()
	}
	if used, need, handled := c.binStreams(op, extras, key, skip); handled {
		return used, need, true
	}
	return c.binBootstrap(op, extras, key, rest, vlen, hk)
}

// setClusterConfig stores a config when it is newer by (revEpoch, rev)
// than the stored one. The order comes from the 16-byte extras {epoch,
// revision} when present, else from the JSON. Answers: OK when stored;
// KEY_EEXISTS (0x02) when not newer (an equal revision is refused too);
// Invalid arguments for bad extras, JSON that does not parse as a config,
// or a vbucket count other than the node's.
func (c *conn) setClusterConfig(extras, value []byte) {
	if len(extras) != 0 && len(extras) != 16 {
		c.binError(protocol.StatusInvalid)
		return
	}
	c.mayBlock() // taking a newer map's view may end a takeover here
	switch _, err := c.s.cl.storeConfig(value, extras, c.s.log.Printf); {
	case err == nil:
		c.binOK(0, nil, nil, nil)
	case errors.Is(err, errNotNewer):
		c.binError(protocol.StatusKeyExists)
	default:
		c.binError(protocol.StatusInvalid)
	}
}

// Errors of storeConfig.
var (
	errNotNewer  = errors.New("cluster config not newer than the stored one")
	errBadConfig = errors.New("not a cluster config of this node's vbucket count")
)

// storeConfig stores value (a config JSON; extras, when 16 bytes, its
// {epoch, revision}) if it is newer than the stored one. A node without
// a manager's lease then takes the new map's view (lease.go).
func (cl *cluster) storeConfig(value, extras []byte, logf func(string, ...any)) (*clusterConfig, error) {
	parsed, err := vbmap.Parse(value)
	if err != nil || parsed.NumVBuckets() != cl.vbs.Len() {
		return nil, errBadConfig
	}
	cc := &clusterConfig{json: append([]byte(nil), value...), revEpoch: parsed.RevEpoch, rev: parsed.Rev,
		replicas: make([]bool, parsed.NumVBuckets()), parsed: parsed}
	for vb, row := range parsed.VBucketServerMap.VBucketMap {
		cc.replicas[vb] = slices.ContainsFunc(row[min(1, len(row)):], func(i int) bool { return i >= 0 })
	}
	if len(extras) == 16 {
		cc.revEpoch = int64(binary.BigEndian.Uint64(extras[0:8]))
		cc.rev = int64(binary.BigEndian.Uint64(extras[8:16]))
	}
	cl.cfgMu.Lock()
	old := cl.config.Load()
	if old != nil && !cc.newerThan(old.revEpoch, old.rev) {
		cl.cfgMu.Unlock()
		return old, errNotNewer
	}
	cl.config.Store(cc)
	cl.cfgMu.Unlock()
	if cl.streams != nil {
		cl.streams.Poke() // writes waiting for a replica the map no longer gives
	}
	if !cl.lease.managerLeased(monoNow()) {
		cl.takeView(parsed, logf)
	}
	return cc, nil
}

// getClusterConfig returns the stored config JSON; the body is empty when
// there is none, or when the client's 16-byte {epoch, revision} extras are
// not older than the stored config.
func (c *conn) getClusterConfig(extras []byte) {
	if len(extras) != 0 && len(extras) != 16 {
		c.binError(protocol.StatusInvalid)
		return
	}
	cc := c.s.cl.config.Load()
	if cc == nil {
		c.binOK(0, nil, nil, nil)
		return
	}
	if len(extras) == 16 {
		epoch := int64(binary.BigEndian.Uint64(extras[0:8]))
		rev := int64(binary.BigEndian.Uint64(extras[8:16]))
		if cc.olderThan(epoch, rev) {
			// The client has seen a newer map than ours: fetch it.
			c.s.cl.lease.fetch.Store(true)
			c.s.cl.lease.wake()
		}
		if !cc.newerThan(epoch, rev) {
			c.binOK(0, nil, nil, nil)
			return
		}
	}
	c.binOK(0, nil, nil, cc.json)
}

// vbucketStats is "stats vbucket" (text and binary), after Couchbase's:
// "vb_<n> <state>" for every vbucket that is not dead or still holds
// items, with its item count and bytes (the store's item sizes: header,
// key and value). "stats vbucket N" always answers for N, dead and empty
// too: a move's recovery reads whether the node has a lineage for it.
func (c *conn) vbucketStats(only int) {
	cl := c.s.cl
	for vb := 0; vb < cl.vbs.Len(); vb++ {
		if only >= 0 && vb != only {
			continue
		}
		st := cl.vbs.Get(vb)
		items, bytes := c.s.store.VBucketUsage(vb)
		if only < 0 && (st == vbucket.Dead || st == 0) && items == 0 {
			continue
		}
		name := "dead"
		if st != 0 {
			name = st.String()
		}
		p := "vb_" + strconv.Itoa(vb)
		c.statLine(p, name)
		c.statUint(p+":items", items)
		c.statUint(p+":bytes", bytes)
		c.statUint(p+":ops", cl.ops[vb].Load())
		c.statUint(p+":not_my_vbucket", cl.refused[vb].Load())
		uuid, high := cl.streams.Log.Lineage(vb)
		c.statUint(p+":uuid", uuid)
		c.statUint(p+":high_seqno", high)
		if st == vbucket.Replica {
			// Where it is fed from, for the manager's janitor, which
			// points a replica that follows the wrong node, or none,
			// at its row's source again.
			src := cl.streams.ReplicaSource(vb)
			if src == "" {
				src = "none"
			}
			c.statLine(p+":source", src)
		}
	}
	if l := &cl.lease; only < 0 && l.on.Load() {
		left := max(l.until.Load()-monoNow(), 0)
		c.statUint("lease_ms_left", uint64(left/int64(time.Millisecond)))
		c.statUint("lease_manager_ms_left", uint64(max(l.mgrUntil.Load()-monoNow(), 0)/int64(time.Millisecond)))
		c.statUint("lease_from_peers", b2u(l.peer.Load() && left > 0))
		c.statUint("lease_refused", l.refused.Load())
	}
	if only < 0 {
		c.statUint("term", cl.term.Load())
		c.statUint("term_refused", cl.termRefused.Load())
	}
	if only < 0 && c.s.cfg.SyncReplication {
		c.statUint("sync_replication_waits", cl.syncWaits.Load())
		c.statUint("sync_replication_timeouts", cl.syncTimeouts.Load())
		c.statUint("sync_replication_read_waits", cl.syncReadWaits.Load())
		c.statUint("sync_replication_read_timeouts", cl.syncReadTimeouts.Load())
	}
}
