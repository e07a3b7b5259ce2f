package store

// Mutation observation and vbucket snapshots, for the streams that copy a
// vbucket to another node (internal/stream). Cluster mode only
// (Config.VBuckets > 0): a standalone store never calls an observer.
//
// The observer is told of every change a client can see to an item of a
// vbucket: a store (set, add, replace, append, prepend, cas, incr/decr,
// touch and gat), a delete, and an expiry found by a lookup or the
// crawler. It is not told of evictions, of flush_all or of DropVBucket:
// each node evicts under its own memory limit, a flush is node-local, and
// dropping a vbucket is what the stream machinery itself asks for.
//
// The call is made while the item's shard lock is held, after the change,
// so changes to one key reach the observer in the order they were made.
// The observer must be quick and must never block or call back into the
// store.

// MutationKind says what happened to a key.
type MutationKind uint8

// Kinds of mutation.
const (
	MutStore  MutationKind = 1 // the key holds a new value or expiry
	MutDelete MutationKind = 2 // the key was deleted
	MutExpire MutationKind = 3 // the key expired (found by a lookup or the crawler)
)

// Observer sees every mutation of a vbucket's items. size is the bytes of
// key and value; seq is the sequence number the Tx was told to use
// (Tx.SetSeqno; 0 means "assign the next one").
type Observer interface {
	Mutated(vb uint16, kind MutationKind, key []byte, size int, seq uint64)
}

// SetObserver installs the observer. It must be called before the store is
// used by more than one goroutine (the server does it at start).
func (s *Store) SetObserver(o Observer) { s.obs = o }

// SetSeqno makes the mutations this Tx makes from now on (until changed)
// carry seq to the observer instead of a fresh number: a stream consumer
// applies a producer's mutation under the producer's sequence number.
func (tx *Tx) SetSeqno(seq uint64) { tx.seq = seq }

// AdvanceCAS makes every CAS the store hands out from now on larger than
// cas, so that items copied from another node with their CAS values keep
// "gets then cas" working across a move.
func (s *Store) AdvanceCAS(cas uint64) {
	for {
		cur := s.casSeq.Load()
		if cur >= cas || s.casSeq.CompareAndSwap(cur, cas) {
			return
		}
	}
}

// Mutations counts the mutations this Tx has told the observer of, ever:
// a caller compares two readings to learn whether a command changed its
// vbucket (a node's synchronous replication waits only after writes).
func (tx *Tx) Mutations() uint64 { return tx.muts }

// observe tells the observer of a mutation of item h (it). Cluster mode
// only (Config.VBuckets > 0). Caller holds h's shard lock.
func (tx *Tx) observe(kind MutationKind, h uint32, it *hdr) {
	if o := tx.s.obs; o != nil {
		tx.muts++
		o.Mutated(*tx.s.vbOf(h), kind, tx.key, it.nkey()+int(it.nbytes), tx.seq)
	}
}

// ItemRef names an item of a vbucket snapshot. It stays valid as a name
// even after the item is gone: ReadRef then reports false.
type ItemRef struct {
	h    uint32
	hash uint64
}

// VBucketRefs returns references to every item vbucket vb holds now, for a
// backfill (Config.VBuckets > 0; else nil). It costs time (a hash of each
// key) and 16 bytes per item of vb, under that vbucket's stripe lock, never
// a scan of the cache.
func (s *Store) VBucketRefs(vb int) []ItemRef {
	v := s.vb
	if v == nil || vb < 0 || vb >= len(v.head) {
		return nil
	}
	m := &v.mu[vb%vbStripes]
	m.Lock()
	defer m.Unlock()
	refs := make([]ItemRef, 0, v.count[vb])
	for h := v.head[vb]; h != 0; h = uint32(*s.linkOf(h)) {
		refs = append(refs, ItemRef{h, s.keyHash(s.hdr(h))})
	}
	return refs
}

// ItemView is a read-only view of an item for ReadRef's callback. Key and
// Value alias slab memory and are valid only during the callback.
type ItemView struct {
	Key, Value []byte
	Flags      uint32
	Exptime    int64 // absolute unix seconds, 0 for never
	CAS        uint64
}

// ReadRef calls fn with the item r names, if it is still linked, still in
// vbucket vb and not expired or flushed, and reports whether it did. fn
// runs under the item's shard lock: it must copy what it keeps and must not
// call the store.
func (s *Store) ReadRef(r ItemRef, vb int, fn func(*ItemView)) bool {
	sh := s.shardOf(r.hash)
	now := s.nowLatched()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// The chunk may have been freed and reused since: it must still be
	// indexed where r's key is, and hold that key, in vbucket vb.
	if !s.inChainLocked(sh, bucket(sh, r.hash), r.h) {
		return false
	}
	it := s.hdr(r.h)
	if s.keyHash(it) != r.hash || int(*s.vbOf(r.h)) != vb {
		return false
	}
	if s.deadLocked(it, now) != Hit {
		return false
	}
	v := ItemView{Key: it.key(), Value: it.value(), Flags: it.flags, Exptime: s.absExptime(it.exptime), CAS: it.cas}
	if s.cfg.DisableCAS {
		v.CAS = 0
	}
	fn(&v)
	return true
}

// AbsExptime returns the held item's expiry as absolute unix seconds (0:
// never), the form a stream carries between nodes.
func (tx *Tx) AbsExptime() int64 {
	if tx.it == nil {
		return 0
	}
	return tx.s.absExptime(tx.it.exptime)
}

func (s *Store) absExptime(rel uint32) int64 {
	if rel == 0 {
		return 0
	}
	nowRel, nowUnix := s.Now()
	return nowUnix - int64(nowRel) + int64(rel)
}
