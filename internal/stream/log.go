package stream

import (
	"sync"

	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// Log numbers the mutations of every vbucket and keeps, for each vbucket
// that is being streamed, a bounded ring of its recent mutations (sequence
// number, kind, key, size; never the value, which a producer reads from
// the store when it sends). It is the store's Observer.
//
// A vbucket's ring is created when the first stream of it opens and grows
// up to Log.MaxRingBytes; past that the oldest entries are dropped, and a
// stream whose position was dropped starts over with a full backfill (a
// "reset" snapshot). So memory is bounded whatever a consumer does.
type Log struct {
	states *vbucket.Table
	max    int // ring budget per vbucket, bytes
	vbs    []vbLog
}

// vbLog is one vbucket's numbering and ring.
type vbLog struct {
	mu   sync.Mutex      // protects every field below; held only for memory work, and subs are poked without blocking
	high uint64          // last sequence number given out or applied
	uuid uint64          // lineage of this vbucket's history (0: none yet)
	gen  uint64          // bumped by Reset: open streams must start over
	flog []Branch        // the failover log: the history's branches, newest first (flog[0].UUID == uuid when uuid != 0)
	ring *ring           // nil until a stream opens
	subs []chan struct{} // producers to poke on a new entry (cap-1 channels)
}

// Branch is one entry of a vbucket's failover log (DCP's): the history
// named UUID begins after sequence number Start, where it parted from the
// branch before it. A vbucket's current lineage is its newest branch.
type Branch struct {
	UUID  uint64
	Start uint64
}

// maxBranches bounds a failover log: a consumer whose lineage has fallen
// off it starts over with a backfill (DCP keeps 25).
const maxBranches = 16

// Entry is one logged mutation, as Read copies it out.
type Entry struct {
	Seq  uint64
	Kind store.MutationKind
	Size uint32 // key and value bytes when it was logged
	Key  []byte // aliases the buffer given to Read
}

type entry struct {
	seq  uint64
	size uint32
	koff uint32
	klen uint8
	kind store.MutationKind
}

// ring is a circular buffer of entries and one of key bytes.
type ring struct {
	ents    []entry
	head, n int // oldest entry, count
	keys    []byte
	kend    int    // where the next key goes in keys
	kused   int    // key bytes held
	dropped uint64 // highest sequence number no longer held (0: none dropped)
	bytes   int    // key and value bytes of the held entries (bytes_behind)
}

const entryBytes = 24 // in-memory size of an entry, for the budget

// DefaultMaxRingBytes is the default ring budget per streamed vbucket.
const DefaultMaxRingBytes = 1 << 20

// NewLog returns a log for the vbuckets of states, with a ring budget of
// maxRing bytes per streamed vbucket (DefaultMaxRingBytes when 0).
func NewLog(states *vbucket.Table, maxRing int) *Log {
	if maxRing <= 0 {
		maxRing = DefaultMaxRingBytes
	}
	return &Log{states: states, max: maxRing, vbs: make([]vbLog, states.Len())}
}

// Mutated implements store.Observer. It runs under the item's shard lock:
// it takes the vbucket's mutex briefly, copies the key into the ring when
// there is one, and pokes subscribed producers without blocking.
//
// A mutation with seq 0 gets the next number, except an expiry noticed on
// a vbucket that is not active (a replica's copy expiring on a read or in
// the crawler): only the active numbers history, replicas follow it.
func (l *Log) Mutated(vb uint16, kind store.MutationKind, key []byte, size int, seq uint64) {
	if int(vb) >= len(l.vbs) {
		return
	}
	if seq == 0 && kind == store.MutExpire && l.states.Get(int(vb)) != vbucket.Active {
		return
	}
	v := &l.vbs[vb]
	v.mu.Lock()
	if seq == 0 {
		seq = v.high + 1
	}
	if seq > v.high {
		v.high = seq
	}
	if v.ring != nil {
		v.ring.add(seq, kind, key, size, l.max)
		for _, ch := range v.subs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	v.mu.Unlock()
}

func (r *ring) add(seq uint64, kind store.MutationKind, key []byte, size, max int) {
	klen := len(key)
	for r.n == len(r.ents) || r.kused+klen > len(r.keys) {
		if r.footprint()*2 <= max {
			r.grow()
			continue
		}
		r.dropOldest()
	}
	e := entry{seq: seq, size: uint32(size), koff: uint32(r.kend), klen: uint8(klen), kind: kind}
	if n := copy(r.keys[r.kend:], key); n < klen { // wraps around
		copy(r.keys, key[n:])
	}
	r.kend = (r.kend + klen) % len(r.keys)
	r.kused += klen
	r.ents[(r.head+r.n)%len(r.ents)] = e
	r.n++
	r.bytes += size
}

// at returns the i-th oldest entry held.
func (r *ring) at(i int) entry {
	i += r.head
	if i >= len(r.ents) {
		i -= len(r.ents)
	}
	return r.ents[i]
}

// appendKey appends e's key, which may wrap around the end of r.keys.
func (r *ring) appendKey(dst []byte, e entry) []byte {
	off, n := int(e.koff), int(e.klen)
	if end := off + n; end <= len(r.keys) {
		return append(dst, r.keys[off:end]...)
	}
	dst = append(dst, r.keys[off:]...)
	return append(dst, r.keys[:off+n-len(r.keys)]...)
}

func (r *ring) footprint() int { return len(r.ents)*entryBytes + len(r.keys) }

func (r *ring) dropOldest() {
	if r.n == 0 {
		return
	}
	e := r.ents[r.head]
	r.dropped = e.seq
	r.kused -= int(e.klen)
	r.bytes -= int(e.size)
	r.head = (r.head + 1) % len(r.ents)
	r.n--
}

// grow doubles both buffers, keeping the entries in order.
func (r *ring) grow() {
	ents := make([]entry, 2*len(r.ents))
	keys := make([]byte, 2*len(r.keys))
	k := 0
	for i := 0; i < r.n; i++ {
		e := r.at(i)
		r.appendKey(keys[k:k], e) // in place: keys has room
		e.koff = uint32(k)
		k += int(e.klen)
		ents[i] = e
	}
	r.ents, r.keys, r.head, r.kend = ents, keys, 0, k
}

func newRing() *ring {
	return &ring{ents: make([]entry, 256), keys: make([]byte, 8<<10)}
}

// Open prepares vb for a stream: it creates the ring if there is none and
// gives the vbucket a lineage if it has none. It returns the lineage, the
// last sequence number and the generation (see Read).
func (l *Log) Open(vb int, newUUID func() uint64) (uuid, high, gen uint64) {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ring == nil {
		v.ring = newRing()
		v.ring.dropped = v.high // what came before the ring is not in it
	}
	if v.uuid == 0 {
		v.uuid = newUUID()
		v.flog = []Branch{{v.uuid, v.high}}
	}
	return v.uuid, v.high, v.gen
}

// NewBranch starts a new branch of vb's history at its last sequence
// number, when this copy is about to turn active where another active may
// have written past it (a replica promoted: DESIGN.md §5). A copy with no
// lineage yet gets one when a stream first opens (Open). With the
// vbcache_unsafe_branch build tag it does nothing (branching false).
func (l *Log) NewBranch(vb int, newUUID func() uint64) {
	if !branching {
		return
	}
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.uuid == 0 {
		return
	}
	v.uuid = newUUID()
	v.pushBranchLocked(Branch{v.uuid, v.high})
}

// pushBranchLocked puts b at the head of the failover log. v.mu is held.
func (v *vbLog) pushBranchLocked(b Branch) {
	if len(v.flog) >= maxBranches {
		v.flog = v.flog[:maxBranches-1]
	}
	v.flog = append([]Branch{b}, v.flog...)
}

// FailoverLog returns a copy of vb's failover log, newest first.
func (l *Log) FailoverLog(vb int) []Branch {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]Branch(nil), v.flog...)
}

// SetFailoverLog makes flog (newest first) vb's failover log: a consumer
// takes its producer's when a stream opens, since its copy is then a
// prefix of the producer's history (or is about to be replaced by a
// backfill of it). An empty flog (a producer that sends none) changes
// nothing.
func (l *Log) SetFailoverLog(vb int, flog []Branch) {
	if len(flog) == 0 {
		return
	}
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	v.flog = append(v.flog[:0:0], flog[:min(len(flog), maxBranches)]...)
	v.uuid = flog[0].UUID
}

// Resume says whether a consumer positioned at (uuid, seqno) may resume
// vb's stream from seqno: its history must be a prefix of this one, that
// is, uuid must be a branch of the failover log and seqno no later than
// where that branch ended here (the start of the next newer branch, or
// the last sequence number for the newest). ranPast reports a consumer
// whose lineage is known but that ran past the end of its branch: it
// holds mutations this copy never had, and must not resume (DCP would
// roll it back to the branch's end; it starts over with a backfill).
// With the vbcache_unsafe_branch build tag only the newest branch is
// known, as before failover logs.
func (l *Log) Resume(vb int, uuid, seqno uint64) (ok, ranPast bool) {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	if uuid == 0 {
		return false, false
	}
	if !branching {
		return uuid == v.uuid && seqno <= v.high, false
	}
	end := v.high
	for _, b := range v.flog {
		if b.UUID == uuid {
			if seqno <= end {
				return true, false
			}
			return false, true
		}
		end = b.Start
	}
	return false, false
}

// Read copies up to len(dst) entries of vb with sequence numbers above
// from into dst (keys into kbuf) and returns them with the vbucket's last
// sequence number. ok is false when entries after from are no longer held
// or the vbucket was reset since generation gen: the stream must start
// over with a backfill.
func (l *Log) Read(vb int, from, gen uint64, dst []Entry, kbuf []byte) (out []Entry, high uint64, ok bool) {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.ring
	if r == nil || v.gen != gen || from < r.dropped {
		return dst[:0], v.high, false
	}
	out = dst[:0]
	kbuf = kbuf[:0]
	// Entries are in sequence order: find the first above from by
	// bisection (a ring holds up to tens of thousands).
	i, j := 0, r.n
	for i < j {
		h := int(uint(i+j) >> 1)
		if r.at(h).seq <= from {
			i = h + 1
		} else {
			j = h
		}
	}
	for ; i < r.n && len(out) < cap(dst); i++ {
		e := r.at(i)
		start := len(kbuf)
		kbuf = r.appendKey(kbuf, e)
		out = append(out, Entry{Seq: e.seq, Kind: e.kind, Size: e.size, Key: kbuf[start:len(kbuf):len(kbuf)]})
	}
	return out, v.high, true
}

// HighGen returns vb's last sequence number and its generation (bumped
// whenever the history is reset or forgotten, the only times the last
// sequence number may go down).
func (l *Log) HighGen(vb int) (high, gen uint64) {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.high, v.gen
}

// KeySeq returns the sequence number of key's last mutation in vb as far
// as the ring tells, for a read that must not return a value its replicas
// lack (internal/server, leaveVB): scanning from the newest entry down to
// floor (a number known replicated), it returns the first entry of key, or
// floor when the scan reaches it without one, or the number below which
// the ring holds nothing when key is not in it at all. Without a ring, or
// in another generation than gen, it returns the vbucket's last number,
// which covers every key.
func (l *Log) KeySeq(vb int, key []byte, gen, floor uint64) uint64 {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.ring
	if r == nil || v.gen != gen {
		return v.high
	}
	for i := r.n - 1; i >= 0; i-- {
		e := r.at(i)
		if e.seq <= floor {
			return floor
		}
		if int(e.klen) == len(key) && r.keyEqual(e, key) {
			return e.seq
		}
	}
	return r.dropped
}

// keyEqual reports whether e's key, which may wrap around the end of
// r.keys, is key (of e's length).
func (r *ring) keyEqual(e entry, key []byte) bool {
	off, n := int(e.koff), int(e.klen)
	if end := off + n; end <= len(r.keys) {
		return string(r.keys[off:end]) == string(key)
	}
	k := len(r.keys) - off
	return string(r.keys[off:]) == string(key[:k]) && string(r.keys[:n-k]) == string(key[k:])
}

// High returns vb's last sequence number.
func (l *Log) High(vb int) uint64 {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.high
}

// Advance moves vb's last sequence number up to seq (a consumer that has
// completed a backfill snapshot ending at seq). The ring's entries up to
// seq were numbered here, not by the producer (a backfill's items carry no
// history), so no stream may resume inside them: a consumer positioned
// before seq starts over.
func (l *Log) Advance(vb int, seq uint64) {
	v := &l.vbs[vb]
	v.mu.Lock()
	v.high = max(v.high, seq)
	if v.ring != nil {
		v.ring.dropped = max(v.ring.dropped, seq)
	}
	v.mu.Unlock()
}

// EnsureRing creates vb's ring if it has none, so that the history this
// node receives can be streamed on (a chained replica, or the replicas of
// a vbucket this node takes over) without a backfill.
func (l *Log) EnsureRing(vb int) {
	v := &l.vbs[vb]
	v.mu.Lock()
	if v.ring == nil {
		v.ring = newRing()
		v.ring.dropped = v.high
	}
	v.mu.Unlock()
}

// LineageAt returns vb's lineage while its history is still generation
// gen; ok is false when it was reset since (Forget, a reset backfill) or
// has no lineage.
func (l *Log) LineageAt(vb int, gen uint64) (uuid uint64, ok bool) {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.uuid, v.gen == gen && v.uuid != 0
}

// Lineage returns vb's lineage and last sequence number.
func (l *Log) Lineage(vb int) (uuid, high uint64) {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.uuid, v.high
}

// Adopt makes vb follow a producer's history: lineage uuid, and (when
// reset) a fresh start whose open streams must start over. A consumer
// calls it on every snapshot marker.
func (l *Log) Adopt(vb int, uuid uint64, reset bool) {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case len(v.flog) > 0 && v.flog[0].UUID == uuid:
	case reset:
		// A backfill from a producer that sent no failover log.
		v.flog = []Branch{{uuid, 0}}
	default:
		// The producer's lineage changed while it streamed (it was
		// promoted): the new branch began no earlier than what this
		// copy had (its true start may be later; an earlier one only
		// sends a consumer that resumes here past it to a backfill).
		v.pushBranchLocked(Branch{uuid, v.high})
	}
	v.uuid = uuid
	if reset {
		v.gen++
		v.high = 0
		if v.ring != nil {
			v.ring = newRing()
		}
	}
}

// Forget drops vb's history (DEL_VBUCKET): a later copy of the vbucket
// gets a new lineage, and open streams start over. Sequence numbers keep
// growing, so no consumer can mistake the new history for the old.
func (l *Log) Forget(vb int) {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	v.uuid = 0
	v.flog = nil
	v.gen++
	if v.ring != nil {
		v.ring = newRing()
		v.ring.dropped = v.high
	}
}

// BytesAfter returns the key and value bytes of the logged mutations of vb
// after seq, and whether the ring still holds all of them (false: at least
// that much).
func (l *Log) BytesAfter(vb int, seq uint64) (bytes uint64, exact bool) {
	v := &l.vbs[vb]
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.ring
	if r == nil {
		return 0, seq >= v.high
	}
	for i := r.n - 1; i >= 0; i-- {
		e := r.ents[(r.head+i)%len(r.ents)]
		if e.seq <= seq {
			return bytes, true
		}
		bytes += uint64(e.size)
	}
	return bytes, seq >= r.dropped
}

// Subscribe makes every new entry of vb poke ch (without blocking).
func (l *Log) Subscribe(vb int, ch chan struct{}) {
	v := &l.vbs[vb]
	v.mu.Lock()
	v.subs = append(v.subs, ch)
	v.mu.Unlock()
}

// Unsubscribe undoes Subscribe.
func (l *Log) Unsubscribe(vb int, ch chan struct{}) {
	v := &l.vbs[vb]
	v.mu.Lock()
	for i, c := range v.subs {
		if c == ch {
			v.subs = append(v.subs[:i], v.subs[i+1:]...)
			break
		}
	}
	v.mu.Unlock()
}

// RingBytes returns the memory the rings hold now.
func (l *Log) RingBytes() int {
	n := 0
	for i := range l.vbs {
		v := &l.vbs[i]
		v.mu.Lock()
		if v.ring != nil {
			n += v.ring.footprint()
		}
		v.mu.Unlock()
	}
	return n
}
