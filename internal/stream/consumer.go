package stream

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// consumer is the receiving end of one stream connection: it asks a
// producer for streams of some vbuckets, applies what arrives to the
// store under the producer's sequence numbers, and acknowledges. It runs
// on the goroutine that calls run, which is the only one that reads its
// connection. A replication consumer also takes vbuckets on and off while
// it runs (add, drop: STREAM_REQ and CLOSE_STREAM on the same
// connection), so that a rebalance changing one replica does not restart
// the streams of all the others.
type consumer struct {
	n        *Node
	src      string
	takeover bool
	nc       net.Conn
	tx       store.Tx
	unacked  int // bytes received since the last BUFFER_ACK; run's own

	// mu protects the fields below it. run holds it while it applies a
	// packet, so that once drop returns nothing more is applied to the
	// vbucket. Taken before Node.mu (applying calls into the Node) and
	// before wmu; never taken with Node.mu held.
	mu         sync.Mutex
	vbs        []uint16 // the vbuckets to request when run starts
	streams    map[uint16]*cstream
	closed     map[uint32]uint16 // streams closed here (opaque → vbucket) whose STREAM_END has not come
	nextOpaque uint32
	started    bool // run has sent its requests: add and drop now send theirs
	over       bool // run has returned: nothing more is applied

	firstDown time.Time // when the first replication stream went down
	downErr   error

	// wmu serializes writes on nc, in the order their packets were
	// decided under mu (it is taken before mu is let go).
	wmu sync.Mutex
}

// cstream is one vbucket's stream on a consumer.
type cstream struct {
	vb                  uint16
	opaque              uint32
	open                bool // the producer accepted the request
	ended               bool
	endReason           uint32
	uuid                uint64
	snapStart, snapEnd  uint64
	snapFlags           uint32
	diskSeq             uint64 // last number given to a backfill item here
	inSnap              bool
	complete, ackedSent uint64
	producerHigh        atomic.Uint64
	completeSeen        atomic.Uint64
	items               atomic.Uint64
	takeover            bool // a takeover's stream, not replication ("stats streams" type)
}

// streamDown notes that a replication stream was refused or ended. The
// others go on; the connection ends (and the replicator reconnects, which
// retries it) when every stream is down, or retryDown after the first.
func (c *consumer) streamDown(s *cstream, err error) error {
	s.ended = true
	if c.firstDown.IsZero() {
		c.firstDown = time.Now()
		c.downErr = err
	}
	for _, t := range c.streams {
		if !t.ended {
			return nil
		}
	}
	return err
}

const retryDown = 2 * time.Second

// errEnded is returned by run for a takeover stream that ended without
// handing the vbucket over.
var errEnded = errors.New("stream ended")

const (
	dialTimeout = 2 * time.Second
	ackEvery    = 256 << 10
)

// plainDial is what a consumer dials with when Node.Dial is nil: TCP, no
// login (package admin's Credentials.DialNet is the logged-in dial; stream
// cannot import admin, which imports it).
func plainDial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.DialContext(ctx, "tcp", addr)
}

// run opens the connection, requests the streams and applies them until
// ctx ends, the connection fails, or (takeover) the stream ends.
func (c *consumer) run(ctx context.Context) error {
	defer c.end()
	dial := c.n.Dial
	if dial == nil {
		dial = plainDial
	}
	nc, err := dial(ctx, c.src, dialTimeout)
	if err != nil {
		return err
	}
	c.nc = nc
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	c.mu.Lock()
	c.streams = map[uint16]*cstream{}
	c.closed = map[uint32]uint16{}
	name, ex := c.n.Name, make([]byte, 4)
	if c.n.ClusterName != nil {
		if cn := c.n.ClusterName(); cn != "" {
			name, ex[3] = cn, OpenNamed
		}
	}
	out := appendReq(nil, OpOpen, 0, 0, 0, ex, []byte(name), nil)
	for _, vb := range c.vbs {
		out = c.requestLocked(out, vb)
	}
	c.started = true
	if err := c.sendUnlock(out); err != nil {
		return err
	}
	r := bufio.NewReaderSize(nc, 64<<10)
	var pk packet
	var buf []byte
	var down time.Time // c.firstDown and c.downErr, as of the last packet
	var downErr error
	for {
		if !down.IsZero() && r.Buffered() == 0 {
			nc.SetReadDeadline(down.Add(retryDown))
		}
		if err := readPacket(r, &pk, &buf); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if downErr != nil {
				return downErr
			}
			return err
		}
		c.unacked += pk.size
		if !down.IsZero() && time.Since(down) > retryDown {
			return downErr // reconnect: retry the streams that are down
		}
		c.mu.Lock()
		done, err := c.handle(&pk)
		down, downErr = c.firstDown, c.downErr
		var ack []byte
		if err == nil && !done && (c.unacked >= ackEvery || r.Buffered() == 0) {
			ack = c.ackLocked()
		}
		if werr := c.sendUnlock(ack); werr != nil {
			return werr
		}
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// end marks the consumer over (add and drop have nothing left to do)
// and takes its streams out of the Node's registry.
func (c *consumer) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.over = true
	for _, s := range c.streams {
		c.n.unregisterConsumer(c.src, s)
	}
}

// requestLocked registers a stream of vb and appends its STREAM_REQ to
// out. c.mu is held.
func (c *consumer) requestLocked(out []byte, vb uint16) []byte {
	uuid, seq := c.n.progress(int(vb))
	var ex [20]byte
	var flags uint32
	if c.takeover {
		flags |= FlagTakeover
	}
	binary.BigEndian.PutUint32(ex[0:], flags)
	binary.BigEndian.PutUint64(ex[4:], seq)
	binary.BigEndian.PutUint64(ex[12:], uuid)
	// The stream starts where this node's copy is: a consumer that
	// resumes at the producer's last number gets no snapshot at all,
	// and must still report that position (a manager waits for it).
	c.nextOpaque++
	s := &cstream{vb: vb, opaque: c.nextOpaque, uuid: uuid, complete: seq, ackedSent: seq, takeover: c.takeover}
	s.completeSeen.Store(seq)
	s.producerHigh.Store(seq)
	c.streams[vb] = s
	c.n.registerConsumer(c.src, s)
	return appendReq(out, OpStreamReq, vb, s.opaque, 0, ex[:], nil, nil)
}

// add asks for a stream of vb on the running connection. It reports
// false when it cannot (the connection is over, or a stream of vb closed
// here has not ended yet): the caller restarts the connection instead.
// Not for a takeover consumer. It must not be called with Node.mu held.
func (c *consumer) add(vb uint16) bool {
	c.mu.Lock()
	switch {
	case c.over:
		c.mu.Unlock()
		return false
	case !c.started:
		if !slices.Contains(c.vbs, vb) {
			c.vbs = append(c.vbs, vb)
		}
		c.mu.Unlock()
		return true
	case c.streams[vb] != nil:
		c.mu.Unlock()
		return true
	}
	for _, v := range c.closed {
		if v == vb {
			c.mu.Unlock()
			return false
		}
	}
	if c.sendUnlock(c.requestLocked(nil, vb)) != nil {
		c.nc.Close() // run fails, and the replicator reconnects with vb
	}
	return true
}

// drop stops applying vb: once it returns nothing more is applied to it
// by this connection, whose other streams go on. The producer is asked to
// close the stream (CLOSE_STREAM); what it sends until its STREAM_END is
// read and dropped. It must not be called with Node.mu held.
func (c *consumer) drop(vb uint16) {
	c.mu.Lock()
	if c.over {
		c.mu.Unlock()
		return
	}
	if !c.started {
		c.vbs = slices.DeleteFunc(c.vbs, func(v uint16) bool { return v == vb })
		c.mu.Unlock()
		return
	}
	s := c.streams[vb]
	if s == nil {
		c.mu.Unlock()
		return
	}
	delete(c.streams, vb)
	c.n.unregisterConsumer(c.src, s)
	if s.ended { // the producer ended it already: nothing more comes
		c.mu.Unlock()
		return
	}
	c.closed[s.opaque] = vb
	if c.sendUnlock(appendReq(nil, OpCloseStream, vb, s.opaque, 0, nil, nil, nil)) != nil {
		c.nc.Close()
	}
}

// sendUnlock lets go of c.mu, which is held, and writes b (if any): wmu
// is taken first, so packets go out in the order they were decided.
func (c *consumer) sendUnlock(b []byte) error {
	if len(b) == 0 {
		c.mu.Unlock()
		return nil
	}
	c.wmu.Lock()
	c.mu.Unlock()
	defer c.wmu.Unlock()
	return c.write(b)
}

// write sends b; wmu is held.
func (c *consumer) write(b []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.nc.Write(b)
	return err
}

// ackLocked returns BUFFER_ACK for the bytes applied and SEQNO_ACK for
// every stream whose complete snapshot moved, to be written. c.mu is held.
func (c *consumer) ackLocked() []byte {
	var out []byte
	if c.unacked > 0 {
		var ex [4]byte
		binary.BigEndian.PutUint32(ex[:], uint32(c.unacked))
		out = appendReq(out, OpBufferAck, 0, 0, 0, ex[:], nil, nil)
		c.unacked = 0
	}
	for _, s := range c.streams {
		if s.complete != s.ackedSent {
			var ex [8]byte
			binary.BigEndian.PutUint64(ex[:], s.complete)
			out = appendReq(out, OpSeqnoAck, s.vb, s.opaque, 0, ex[:], nil, nil)
			s.ackedSent = s.complete
		}
	}
	return out
}

// handle applies one packet, with c.mu held. done reports the end of a
// takeover.
func (c *consumer) handle(pk *packet) (done bool, err error) {
	if pk.Magic == protocol.MagicResponse {
		switch pk.Opcode {
		case OpOpen:
			if pk.Status != protocol.StatusOK {
				return false, fmt.Errorf("stream open refused by %s: status %#x %s", c.src, uint16(pk.Status), pk.value)
			}
		case OpStreamReq:
			// (The answer to a stream closed since is in no stream: dropped.)
			for _, s := range c.streams {
				if s.opaque == pk.Opaque {
					if pk.Status != protocol.StatusOK {
						err := fmt.Errorf("stream of vbucket %d refused by %s: status %#x", s.vb, c.src, uint16(pk.Status))
						if c.takeover {
							return false, err
						}
						return false, c.streamDown(s, err)
					}
					flog, err := parseFailoverLog(pk.value)
					if err != nil {
						return false, err
					}
					c.n.Log.SetFailoverLog(int(s.vb), flog)
					s.open = true
				}
			}
		}
		return false, nil
	}
	s := c.streams[pk.VBucket]
	if s == nil || s.opaque != pk.Opaque {
		if vb, ok := c.closed[pk.Opaque]; ok && vb == pk.VBucket {
			// A stream closed here (drop): ignored until its end.
			if pk.Opcode == OpStreamEnd {
				delete(c.closed, pk.Opaque)
			}
			return false, nil
		}
		return false, fmt.Errorf("%w: %#x for a stream not requested (vbucket %d)", errBadPacket, pk.Opcode, pk.VBucket)
	}
	vb := int(s.vb)
	switch pk.Opcode {
	case OpSnapshot:
		if len(pk.extras) != 28 {
			return false, errBadPacket
		}
		start, end, uuid, flags := be64(pk.extras[0:]), be64(pk.extras[8:]), be64(pk.extras[16:]), be32(pk.extras[24:])
		if uuid == 0 && lineageChecks {
			// No producer names no lineage: taken, the copy would
			// keep its items under none, and a failover rank it by a
			// seqno it does not stand for.
			return false, fmt.Errorf("%w: a snapshot marker for vbucket %d names no lineage", errBadPacket, vb)
		}
		if s.inSnap {
			c.closeSnapshot(s) // a new marker closes the previous snapshot
		}
		if flags&SnapReset != 0 {
			c.n.Store.DropVBucket(vb)
			s.setComplete(0)
		}
		c.n.Log.Adopt(vb, uuid, flags&SnapReset != 0)
		c.n.Log.EnsureRing(vb)
		s.uuid, s.snapStart, s.snapEnd, s.snapFlags, s.inSnap = uuid, start, end, flags, true
		s.diskSeq = c.n.Log.High(vb)
		s.producerHigh.Store(max(s.producerHigh.Load(), end))
		if end < start { // empty
			s.setComplete(end)
			s.inSnap = false
		}
		c.n.setProgress(vb, uuid, s.complete)
	case OpMutation:
		if len(pk.extras) != 20 {
			return false, errBadPacket
		}
		seq, exp, flags := be64(pk.extras[0:]), int64(be64(pk.extras[8:])), be32(pk.extras[16:])
		if s.inSnap && s.snapFlags&SnapDisk != 0 {
			// A backfill's items all carry the snapshot's end. Numbered
			// so here, a chained replica streaming from this node while
			// the backfill runs would skip the rest of it; so they get
			// consecutive numbers up to the end, which the history
			// reaches when the snapshot closes.
			seq = min(s.diskSeq+1, s.snapEnd)
			s.diskSeq = seq
		}
		c.apply(vb, seq, pk.key, pk.value, flags, exp, pk.CAS)
		s.items.Add(1)
		c.seen(s, seq)
	case OpDeletion, OpExpiration:
		if len(pk.extras) != 8 {
			return false, errBadPacket
		}
		seq := be64(pk.extras)
		kind := store.MutDelete
		if pk.Opcode == OpExpiration {
			kind = store.MutExpire
		}
		c.remove(vb, seq, pk.key, kind)
		s.items.Add(1)
		c.seen(s, seq)
	case OpSetState:
		if len(pk.extras) != 1 {
			return false, errBadPacket
		}
		// Only the handover's two steps, in order: replica → pending →
		// active. A vbucket whose state someone else changed meanwhile
		// (SET_VBUCKET, DEL_VBUCKET) refuses, and the handover aborts.
		st := vbucket.State(pk.extras[0])
		status := protocol.StatusOK
		switch {
		case !c.takeover:
			status = protocol.StatusInvalid
		case st == vbucket.Pending && c.n.States.CompareAndSet(vb, vbucket.Replica, vbucket.Pending):
		case st == vbucket.Active && c.n.States.CompareAndSet(vb, vbucket.Pending, vbucket.Active):
		default:
			status = protocol.StatusInvalid
		}
		// Written with c.mu held: only a takeover consumer gets here, and
		// nothing adds or drops its streams.
		out := append(c.ackLocked(), protocol.AppendResponse(nil, OpSetState, status, pk.Opaque, 0, nil, nil, nil)...)
		c.wmu.Lock()
		err := c.write(out)
		c.wmu.Unlock()
		if err != nil {
			return false, err
		}
	case OpStreamEnd:
		reason := EndClosed
		if len(pk.extras) == 4 {
			reason = be32(pk.extras)
		}
		s.ended, s.endReason = true, reason
		if s.inSnap {
			c.closeSnapshot(s)
		}
		if c.takeover {
			if reason == EndOK {
				return true, nil
			}
			return false, fmt.Errorf("%w: reason %d", errEnded, reason)
		}
		return false, c.streamDown(s, fmt.Errorf("%w: vbucket %d, reason %d", errEnded, vb, reason))
	default:
		return false, fmt.Errorf("%w: opcode %#x", errBadPacket, pk.Opcode)
	}
	return false, nil
}

// closeSnapshot marks the current snapshot complete.
func (c *consumer) closeSnapshot(s *cstream) {
	if s.snapFlags&SnapDisk != 0 {
		c.n.Log.Advance(int(s.vb), s.snapEnd)
	}
	s.setComplete(s.snapEnd)
	s.inSnap = false
}

func (s *cstream) setComplete(seq uint64) {
	s.complete = seq
	s.completeSeen.Store(seq)
}

// seen notes a mutation's sequence number: a memory snapshot is complete
// when its last number arrives.
func (c *consumer) seen(s *cstream, seq uint64) {
	if s.inSnap && s.snapFlags&SnapDisk == 0 && seq >= s.snapEnd {
		s.setComplete(s.snapEnd)
		s.inSnap = false
		c.n.setProgress(int(s.vb), s.uuid, s.complete)
	}
}

// apply stores a mutation under the producer's sequence number and CAS.
func (c *consumer) apply(vb int, seq uint64, key, value []byte, flags uint32, exp int64, cas uint64) {
	st := c.n.Store
	var rel uint32
	if exp != 0 {
		_, now := st.Now()
		if exp <= now {
			c.remove(vb, seq, key, store.MutExpire)
			return
		}
		rel = st.RelTime(exp)
	}
	tx := &c.tx
	st.Begin(tx, key)
	tx.SetVBucket(uint16(vb))
	tx.SetSeqno(seq)
	if err := tx.Store(flags, rel, cas, value, nil); err != nil {
		// This node cannot hold the item (memory, -I): it is a cache,
		// so the copy goes without it; the old value must not stay.
		if tx.Found() {
			tx.Delete()
		} else {
			c.n.Log.Mutated(uint16(vb), store.MutDelete, key, len(key), seq)
		}
	}
	tx.SetSeqno(0)
	tx.End()
	if cas != 0 {
		st.AdvanceCAS(cas)
	}
}

func (c *consumer) remove(vb int, seq uint64, key []byte, kind store.MutationKind) {
	tx := &c.tx
	if c.n.Store.Begin(tx, key) == store.Hit {
		tx.SetSeqno(seq)
		tx.Delete()
		tx.SetSeqno(0)
		tx.End()
		return
	}
	tx.End()
	// Nothing to delete here, but the history moves on (and a chained
	// replica of this node must hear of it).
	c.n.Log.Mutated(uint16(vb), kind, key, len(key), seq)
}
