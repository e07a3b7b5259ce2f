package stream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// producer serves one stream connection on the source node: a reader (the
// goroutine that called ServeProducer) takes the consumer's requests and
// acknowledgements, and a writer goroutine, owned by ServeProducer, sends
// every stream's snapshots and mutations. The writer is the only goroutine
// that writes to the connection.
type producer struct {
	n     *Node
	nc    net.Conn
	name  string
	named bool // name is the map's name for the consumer's node (OpenNamed)

	poke  chan struct{} // cap 1: new log entries, acknowledgements, new or closing streams
	done  chan struct{} // closed when the reader stops: the connection is gone
	ended chan struct{} // closed when ServeProducer has finished its streams (EndTakeoverFrom)

	// mu protects streams, ctrl and unacked. The connection is never
	// read, written or closed under it, and the writer is poked after it
	// (pokeWriter, which never blocks anyway); streamReq calls the Log
	// under it (a producer's mu, then a vbucket's log mu: the Log takes
	// no lock of ours).
	mu      sync.Mutex
	streams []*pstream
	ctrl    []byte // replies to the consumer's requests, written before data
	unacked int    // bytes written and not yet acknowledged (BUFFER_ACK)

	// Writer-owned.
	out  []byte
	tx   store.Tx
	ents []Entry
	kbuf []byte
}

// pstream is one vbucket's stream on a producer.
type pstream struct {
	vb       uint16
	opaque   uint32
	takeover bool
	resp     chan protocol.Status // the consumer's answers to SET_STATE

	closing atomic.Bool   // the consumer asked to close it
	acked   atomic.Uint64 // the consumer's last complete snapshot (SEQNO_ACK)
	sent    atomic.Uint64 // last sequence number sent
	phase   atomic.Int32  // phaseBackfill, phaseLive, phaseHandover
	items   atomic.Uint64 // mutations and deletions sent

	// Writer-owned.
	uuid, gen  uint64
	opened     bool
	refs       []store.ItemRef
	ri         int
	reset      bool // the next backfill starts with a reset marker
	deadByUs   bool // the takeover made the vbucket dead here
	sentActive bool // the takeover told the consumer to go active
}

const (
	phaseBackfill = iota
	phaseLive
	phaseHandover
)

func phaseName(p int32) string {
	switch p {
	case phaseBackfill:
		return "backfill"
	case phaseLive:
		return "live"
	}
	return "handover"
}

// Producer tuning.
const (
	windowBytes     = 4 << 20 // unacknowledged bytes a producer may have in flight
	writeChunk      = 256 << 10
	backfillBatch   = 512
	logBatch        = 256
	handoverTimeout = 30 * time.Second
	writeTimeout    = 30 * time.Second
)

// ServeProducer runs the producer side of a stream connection whose OPEN
// the server has already answered. buffered holds bytes the server read
// past the OPEN. It returns when the connection ends; the caller closes
// it.
//
// named says the consumer named itself as the cluster's map names it
// (its OPEN's flag, Node.ClusterName).
func (n *Node) ServeProducer(nc net.Conn, buffered []byte, name string, named bool) {
	p := &producer{n: n, nc: nc, name: name, named: named, poke: make(chan struct{}, 1), done: make(chan struct{}),
		ended: make(chan struct{}), ents: make([]Entry, 0, logBatch)}
	n.addProducer(p)
	defer n.removeProducer(p)
	defer close(p.ended)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.writeLoop()
	}()
	p.readLoop(bufio.NewReaderSize(io.MultiReader(bytes.NewReader(buffered), nc), 64<<10))
	close(p.done)
	nc.Close() // unblocks a writer stuck in Write
	wg.Wait()
	p.mu.Lock()
	streams := append([]*pstream(nil), p.streams...)
	p.mu.Unlock()
	// Finish (and turn back active) before the streams disappear from
	// "stats streams", so nobody sees a dead vbucket with no stream.
	for _, s := range streams {
		p.finish(s)
	}
	p.mu.Lock()
	p.streams = nil
	p.mu.Unlock()
}

// finish releases a stream; a takeover that made the vbucket dead here
// but never told the consumer to go active turns it back active.
func (p *producer) finish(s *pstream) {
	p.n.Log.Unsubscribe(int(s.vb), p.poke)
	if s.deadByUs && !s.sentActive {
		if p.n.States.CompareAndSet(int(s.vb), vbucket.Dead, vbucket.Active) {
			p.n.logf("takeover of vbucket %d to %s aborted after the handover began: active here again", s.vb, p.name)
		}
	}
}

func (p *producer) pokeWriter() {
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

func (p *producer) reply(op protocol.Opcode, status protocol.Status, opaque uint32, body []byte) {
	p.mu.Lock()
	p.ctrl = protocol.AppendResponse(p.ctrl, op, status, opaque, 0, nil, nil, body)
	p.mu.Unlock()
	p.pokeWriter()
}

func (p *producer) find(vb uint16) *pstream {
	for _, s := range p.streams {
		if s.vb == vb {
			return s
		}
	}
	return nil
}

func (p *producer) readLoop(r *bufio.Reader) {
	var pk packet
	var buf []byte
	for {
		if err := readPacket(r, &pk, &buf); err != nil {
			return
		}
		if pk.Magic == protocol.MagicResponse {
			if pk.Opcode == OpSetState {
				p.mu.Lock()
				s := p.findOpaque(pk.Opaque)
				p.mu.Unlock()
				if s != nil {
					select { // cap 1; a stale answer is dropped, never waited on
					case s.resp <- pk.Status:
					default:
					}
				}
			}
			continue
		}
		switch pk.Opcode {
		case OpStreamReq:
			p.streamReq(&pk)
		case OpCloseStream:
			p.mu.Lock()
			s := p.find(pk.VBucket)
			p.mu.Unlock()
			if s == nil {
				p.reply(pk.Opcode, protocol.StatusKeyNotFound, pk.Opaque, nil)
				continue
			}
			s.closing.Store(true)
			p.reply(pk.Opcode, protocol.StatusOK, pk.Opaque, nil)
		case OpBufferAck:
			if len(pk.extras) == 4 {
				p.mu.Lock()
				p.unacked = max(0, p.unacked-int(be32(pk.extras)))
				p.mu.Unlock()
				p.pokeWriter()
			}
		case OpSeqnoAck:
			if len(pk.extras) == 8 {
				p.mu.Lock()
				s := p.find(pk.VBucket)
				p.mu.Unlock()
				if s != nil {
					s.acked.Store(be64(pk.extras))
					p.n.acked()
				}
			}
		case protocol.OpNoop:
			p.reply(pk.Opcode, protocol.StatusOK, pk.Opaque, nil)
		default:
			p.reply(pk.Opcode, protocol.StatusUnknown, pk.Opaque, []byte(protocol.StatusUnknown.Text()))
		}
	}
}

func (p *producer) findOpaque(opaque uint32) *pstream {
	for _, s := range p.streams {
		if s.opaque == opaque {
			return s
		}
	}
	return nil
}

// streamReq opens a stream: of an active or replica vbucket, of an active
// one for a takeover. It resumes from the consumer's position when the
// lineage matches and the log still holds what follows; otherwise the
// stream begins with a reset backfill.
func (p *producer) streamReq(pk *packet) {
	vb := int(pk.VBucket)
	if len(pk.extras) != 20 || len(pk.key) != 0 {
		p.reply(pk.Opcode, protocol.StatusInvalid, pk.Opaque, []byte(protocol.StatusInvalid.Text()))
		return
	}
	flags, start, uuid := be32(pk.extras[0:4]), be64(pk.extras[4:12]), be64(pk.extras[12:20])
	st := p.n.States.Get(vb)
	takeover := flags&FlagTakeover != 0
	if st != vbucket.Active && (takeover || st != vbucket.Replica) {
		p.reply(pk.Opcode, protocol.StatusNotMyVBucket, pk.Opaque, nil)
		return
	}
	p.mu.Lock()
	if p.find(pk.VBucket) != nil || p.findOpaque(pk.Opaque) != nil {
		p.mu.Unlock()
		p.reply(pk.Opcode, protocol.StatusKeyExists, pk.Opaque, []byte("stream exists"))
		return
	}
	s := &pstream{vb: pk.VBucket, opaque: pk.Opaque, takeover: takeover, resp: make(chan protocol.Status, 1)}
	p.n.Log.Subscribe(vb, p.poke)
	myUUID, _, gen := p.n.Log.Open(vb, p.n.newUUID)
	s.uuid, s.gen, s.opened = myUUID, gen, true
	s.phase.Store(phaseBackfill)
	s.reset = true
	resume, ranPast := p.n.Log.Resume(vb, uuid, start)
	if resume {
		if _, _, ok := p.n.Log.Read(vb, start, gen, p.ents[:0:0], nil); ok {
			s.phase.Store(phaseLive)
			s.sent.Store(start)
			s.acked.Store(start)
		}
	}
	if ranPast {
		// The consumer holds mutations of a branch past where this
		// history left it (a replica of an old active that got further
		// than the one promoted): a backfill replaces its copy.
		p.n.branchRebuilds.Add(1)
		p.n.logf("stream of vbucket %d to %s: its position (lineage %016x, seqno %d) ran past where that branch ended here; it starts over with a backfill", vb, p.name, uuid, start)
	}
	p.streams = append(p.streams, s)
	// The answer carries this copy's failover log, which the consumer
	// takes as its own (appendFailoverLog).
	p.ctrl = protocol.AppendResponse(p.ctrl, pk.Opcode, protocol.StatusOK, pk.Opaque, 0, nil, nil, appendFailoverLog(nil, p.n.Log.FailoverLog(vb)))
	p.mu.Unlock()
	p.pokeWriter()
}

var errGone = errors.New("stream: connection closed")

func (p *producer) flush() error {
	if len(p.out) == 0 {
		return nil
	}
	// The bytes are in flight from before the write: a large write
	// returns only once the consumer has read most of it, and its
	// BUFFER_ACKs for them may arrive first. Counted after the write,
	// those acknowledgements found nothing to subtract and were lost,
	// and the window stayed full for good.
	p.mu.Lock()
	p.unacked += len(p.out)
	p.mu.Unlock()
	p.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := p.nc.Write(p.out)
	p.out = p.out[:0]
	return err
}

func (p *producer) windowFull() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unacked >= windowBytes
}

func (p *producer) writeLoop() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-p.poke:
		case <-tick.C:
		}
		for {
			p.mu.Lock()
			p.out = append(p.out, p.ctrl...)
			p.ctrl = p.ctrl[:0]
			streams := append([]*pstream(nil), p.streams...)
			p.mu.Unlock()
			progressed := false
			for _, s := range streams {
				if p.windowFull() {
					break
				}
				did, err := p.produce(s)
				if err != nil {
					return
				}
				progressed = progressed || did
				if len(p.out) >= writeChunk {
					if p.flush() != nil {
						return
					}
				}
			}
			if p.flush() != nil {
				return
			}
			if !progressed {
				break
			}
			select {
			case <-p.done:
				return
			default:
			}
		}
	}
}

func (p *producer) remove(s *pstream) {
	p.finish(s)
	p.mu.Lock()
	for i, t := range p.streams {
		if t == s {
			p.streams = append(p.streams[:i], p.streams[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
}

func (p *producer) end(s *pstream, reason uint32) {
	var ex [4]byte
	binary.BigEndian.PutUint32(ex[:], reason)
	p.out = appendReq(p.out, OpStreamEnd, s.vb, s.opaque, 0, ex[:], nil, nil)
	p.remove(s)
}

func (p *producer) marker(s *pstream, start, end uint64, flags uint32) {
	var ex [28]byte
	binary.BigEndian.PutUint64(ex[0:], start)
	binary.BigEndian.PutUint64(ex[8:], end)
	binary.BigEndian.PutUint64(ex[16:], s.uuid)
	binary.BigEndian.PutUint32(ex[24:], flags)
	p.out = appendReq(p.out, OpSnapshot, s.vb, s.opaque, 0, ex[:], nil, nil)
}

func (p *producer) mutation(s *pstream, seq uint64, v *store.ItemView) {
	var ex [20]byte
	binary.BigEndian.PutUint64(ex[0:], seq)
	binary.BigEndian.PutUint64(ex[8:], uint64(v.Exptime))
	binary.BigEndian.PutUint32(ex[16:], v.Flags)
	p.out = appendReq(p.out, OpMutation, s.vb, s.opaque, v.CAS, ex[:], v.Key, v.Value)
	s.items.Add(1)
}

func (p *producer) removal(s *pstream, op protocol.Opcode, seq uint64, key []byte) {
	var ex [8]byte
	binary.BigEndian.PutUint64(ex[:], seq)
	p.out = appendReq(p.out, op, s.vb, s.opaque, 0, ex[:], key, nil)
	s.items.Add(1)
}

// produce appends the stream's next piece of work to p.out and reports
// whether there was any.
func (p *producer) produce(s *pstream) (bool, error) {
	vb := int(s.vb)
	if s.closing.Load() {
		p.end(s, EndClosed)
		return true, nil
	}
	if st := p.n.States.Get(vb); st != vbucket.Active && st != vbucket.Replica {
		p.end(s, EndStateChanged)
		return true, nil
	}
	if s.phase.Load() == phaseBackfill {
		p.backfill(s)
		return true, nil
	}
	ents, _, ok := p.n.Log.Read(vb, s.sent.Load(), s.gen, p.ents[:0:logBatch], p.kbuf)
	if !ok {
		p.restart(s)
		return true, nil
	}
	if len(ents) == 0 {
		if s.takeover {
			return true, p.handover(s)
		}
		return false, nil
	}
	p.sendEntries(s, batchBytes(ents, writeChunk))
	return true, nil
}

// batchBytes returns the longest prefix of ents (at least one entry)
// whose keys and values (Entry.Size) add up to at most limit bytes: a batch of the log
// is sent in one snapshot, built in p.out, so its size must not follow
// the values' (256 entries of 1 MB would be 256 MB in memory at once).
func batchBytes(ents []Entry, limit int) []Entry {
	n := 0
	for i, e := range ents {
		n += int(e.Size)
		if n > limit && i > 0 {
			return ents[:i]
		}
	}
	return ents
}

// restart begins a stream again with a reset backfill: the log no longer
// holds what the consumer lacks, or the vbucket's history was reset.
func (p *producer) restart(s *pstream) {
	s.uuid, _, s.gen = p.n.Log.Open(int(s.vb), p.n.newUUID)
	s.refs, s.ri, s.reset = nil, 0, true
	s.phase.Store(phaseBackfill)
}

func (p *producer) backfill(s *pstream) {
	vb := int(s.vb)
	if s.refs == nil {
		var high uint64
		s.uuid, high, s.gen = p.n.Log.Open(vb, p.n.newUUID)
		s.refs = p.n.Store.VBucketRefs(vb)
		s.ri = 0
		s.sent.Store(high)
		flags := SnapDisk
		if s.reset {
			flags |= SnapReset
		}
		p.marker(s, 0, high, flags)
		if s.refs == nil {
			s.refs = []store.ItemRef{}
		}
	}
	seq := s.sent.Load()
	for n := 0; s.ri < len(s.refs) && n < backfillBatch && len(p.out) < writeChunk; n++ {
		p.n.Store.ReadRef(s.refs[s.ri], vb, func(v *store.ItemView) { p.mutation(s, seq, v) })
		s.ri++
	}
	if s.ri == len(s.refs) {
		s.refs, s.ri, s.reset = nil, 0, false
		// An empty marker closes the backfill snapshot for the consumer.
		p.marker(s, seq+1, seq, SnapMemory)
		s.phase.Store(phaseLive)
	}
}

// sendEntries sends the current state of each logged key: its value if
// it is still there, else a deletion. A key changed again later is sent
// again for that later entry, so the consumer ends where the source is.
// It returns false, having sent nothing and begun the stream again
// (restart), when vb's history was reset since ents were read (a
// DEL_VBUCKET here): the entries belong to a history that is gone.
func (p *producer) sendEntries(s *pstream, ents []Entry) bool {
	// The marker names the lineage as it is now: a copy promoted while
	// it streams (NewBranch) goes on with its new branch. A reset
	// history has none (lineage 0), which no marker may name: a
	// consumer would keep its copy under no lineage.
	uuid, ok := p.n.Log.LineageAt(int(s.vb), s.gen)
	if !ok && lineageChecks {
		p.restart(s)
		return false
	}
	s.uuid = uuid
	p.marker(s, ents[0].Seq, ents[len(ents)-1].Seq, SnapMemory)
	for _, e := range ents {
		p.sendCurrent(s, e)
	}
	s.sent.Store(ents[len(ents)-1].Seq)
	return true
}

func (p *producer) sendCurrent(s *pstream, e Entry) {
	tx := &p.tx
	if p.n.Store.Begin(tx, e.Key) == store.Hit {
		v := store.ItemView{Key: e.Key, Value: tx.Value(), Flags: tx.Flags(), Exptime: tx.AbsExptime(), CAS: tx.CAS()}
		p.mutation(s, e.Seq, &v)
		tx.End()
		return
	}
	tx.End()
	op := OpDeletion
	if e.Kind == store.MutExpire {
		op = OpExpiration
	}
	p.removal(s, op, e.Seq, e.Key)
}

// failpoint (tests only) holds a handover for d (0: not at all), or
// until the connection ends, so that a test can kill a node at that
// moment: drained (this node active, the consumer a replica) or dead
// here and pending there.
func (p *producer) failpoint(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.done:
	}
}

// handover ends a drained takeover stream (DESIGN.md §3): the consumer
// turns pending; this node turns the vbucket dead, fencing every write in
// flight; the last mutations go out; the consumer is told to turn active;
// the stream ends. A failure before the consumer is told to turn active
// leaves (or turns) the vbucket active here; a failure after it leaves it
// dead here, and whoever drives the move asks the consumer (see Node).
func (p *producer) handover(s *pstream) error {
	vb := int(s.vb)
	s.phase.Store(phaseHandover)
	p.failpoint(p.n.drainedPause)
	if st := p.setState(s, vbucket.Pending); st != protocol.StatusOK {
		p.n.logf("takeover of vbucket %d to %s: consumer answered %#x to pending; aborted", vb, p.name, st)
		p.end(s, EndAborted)
		return p.flush()
	}
	if _, err := p.n.States.SetFenced(vb, vbucket.Dead); err != nil {
		p.end(s, EndAborted)
		return p.flush()
	}
	s.deadByUs = true
	p.failpoint(p.n.handoverPause)
	// Nothing new can be logged for vb now: send what is left.
	for {
		ents, _, ok := p.n.Log.Read(vb, s.sent.Load(), s.gen, p.ents[:0:logBatch], p.kbuf)
		if ok && len(ents) == 0 {
			break
		}
		if !ok || !p.sendEntries(s, ents) {
			// The ring overflowed while the consumer was slow, or the
			// history was reset: copy the vbucket again (it no longer
			// changes).
			p.restart(s)
			for s.phase.Load() == phaseBackfill {
				p.backfill(s)
				if err := p.flush(); err != nil {
					return err
				}
			}
			continue
		}
		if err := p.flush(); err != nil {
			return err
		}
	}
	st := p.setState(s, vbucket.Active)
	switch st {
	case protocol.StatusOK:
		p.end(s, EndOK)
		p.n.moved.Add(1)
		// This node's copy is the consumer's history up to now: should it
		// become the new active's replica, it resumes from here.
		uuid, high := p.n.Log.Lineage(vb)
		p.n.setProgress(vb, uuid, high)
		return p.flush()
	case statusNoAnswer:
		// The consumer may or may not have turned active: stay dead.
		p.n.logf("takeover of vbucket %d to %s: no answer to active; vbucket stays dead here", vb, p.name)
		return errGone
	}
	// The consumer refused to turn active: it is not active, so this
	// node may serve again.
	s.sentActive = false
	p.end(s, EndAborted)
	return p.flush()
}

// Pseudo-statuses of setState: the request went out and no answer came
// (the consumer may have acted on it), or it could not go out at all.
const (
	statusNoAnswer protocol.Status = 0xffff
	statusGone     protocol.Status = 0xfffe
)

// setState tells the consumer to move the vbucket to st and waits for its
// answer.
func (p *producer) setState(s *pstream, st vbucket.State) protocol.Status {
	select { // drop a stale answer
	case <-s.resp:
	default:
	}
	select {
	case <-p.done:
		// The consumer's side is closed: it cannot read this request.
		return statusGone
	default:
	}
	p.out = appendReq(p.out, OpSetState, s.vb, s.opaque, 0, []byte{byte(st)}, nil, nil)
	if err := p.flush(); err != nil {
		// A failed write leaves nothing the consumer could act on (a
		// socket with an error takes no bytes; a partial packet is
		// never applied).
		return statusGone
	}
	if st == vbucket.Active {
		s.sentActive = true
	}
	t := time.NewTimer(handoverTimeout)
	defer t.Stop()
	select {
	case r := <-s.resp:
		return r
	case <-p.done:
	case <-t.C:
	}
	return statusNoAnswer
}

// streamStats reports a producer's streams.
func (p *producer) stats(only int, add func(name, value string)) {
	p.mu.Lock()
	streams := append([]*pstream(nil), p.streams...)
	unacked := p.unacked
	p.mu.Unlock()
	pre := "producer:" + p.name + ":"
	add(pre+"unacked_bytes", fmt.Sprint(unacked))
	for _, s := range streams {
		vb := int(s.vb)
		if only >= 0 && vb != only {
			continue
		}
		q := fmt.Sprintf("%svb_%d:", pre, vb)
		kind := "replication"
		if s.takeover {
			kind = "takeover"
		}
		high := p.n.Log.High(vb)
		acked := s.acked.Load()
		behind, exact := p.n.Log.BytesAfter(vb, acked)
		add(q+"type", kind)
		add(q+"phase", phaseName(s.phase.Load()))
		add(q+"high_seqno", fmt.Sprint(high))
		add(q+"sent_seqno", fmt.Sprint(s.sent.Load()))
		add(q+"acked_seqno", fmt.Sprint(acked))
		add(q+"seqno_behind", fmt.Sprint(high-min(high, acked)))
		b := fmt.Sprint(behind)
		if !exact {
			b = ">" + b
		}
		add(q+"bytes_behind", b)
		add(q+"items_sent", fmt.Sprint(s.items.Load()))
	}
}
