package store

import "sync"

// Per-vbucket item lists, kept only when Config.VBuckets > 0 (cluster
// mode), so that dropping a vbucket (DEL_VBUCKET) costs time in proportion
// to that vbucket's items and never scans the cache.
//
// The links live outside the item header, which has no room to spare, and
// so does each item's vbucket id (a standalone store, where every item is
// in vbucket 0, keeps neither): each slab page carries side arrays with one
// prev/next handle pair (pageSlot.links) and one vbucket id (pageSlot.vbs)
// per chunk, sized when the page is given to a class: 10 bytes per chunk
// in cluster mode. Each vbucket
// has a list head and an item count; vbMu stripes protect them and the
// links of the items on the lists. Lock order: shard → class → vbucket
// stripe (a stripe is always taken last and held briefly). Items are linked
// when Tx.Store links them and unlinked in unlinkLRULocked, the one place
// every removal (delete, replace, eviction, expiry, page moves) goes
// through.

const vbStripes = 64

type vbLists struct {
	mu    [vbStripes]sync.Mutex // mu[vb%vbStripes] protects head[vb], count[vb], bytes[vb] and the links of vb's items
	head  []uint32
	count []uint64
	bytes []uint64 // sum of item sizes (hdr.size)
}

func (s *Store) linkOf(h uint32) *uint64 {
	return &s.slot(h >> s.chunkBits).links[h&s.chunkMask]
}

// vbOf returns where chunk h's vbucket id is kept. It is written by
// Tx.Store before the item is linked and read, like the header's immutable
// fields, by holders of the item's shard lock, or of its class lock or
// vbucket stripe while it is linked.
func (s *Store) vbOf(h uint32) *uint16 {
	return &s.slot(h >> s.chunkBits).vbs[h&s.chunkMask]
}

// vbLink puts item h on its vbucket's list. Caller holds the item's shard
// lock (and possibly its class lock).
func (s *Store) vbLink(h uint32, it *hdr) {
	v := s.vb
	vb := int(*s.vbOf(h))
	m := &v.mu[vb%vbStripes]
	m.Lock()
	next := v.head[vb]
	*s.linkOf(h) = uint64(next) // prev 0
	if next != 0 {
		l := s.linkOf(next)
		*l = *l&0xffffffff | uint64(h)<<32
	}
	v.head[vb] = h
	v.count[vb]++
	v.bytes[vb] += uint64(it.size())
	m.Unlock()
}

// vbUnlink takes item h off its vbucket's list. Caller holds the item's
// shard and class locks.
func (s *Store) vbUnlink(h uint32, it *hdr) {
	v := s.vb
	vb := int(*s.vbOf(h))
	m := &v.mu[vb%vbStripes]
	m.Lock()
	l := *s.linkOf(h)
	prev, next := uint32(l>>32), uint32(l)
	if prev != 0 {
		p := s.linkOf(prev)
		*p = *p&^0xffffffff | uint64(next)
	} else {
		v.head[vb] = next
	}
	if next != 0 {
		n := s.linkOf(next)
		*n = *n&0xffffffff | uint64(prev)<<32
	}
	v.count[vb]--
	v.bytes[vb] -= uint64(it.size())
	m.Unlock()
}

// dropVBucket implements Store.DropVBucket.
func (s *Store) dropVBucket(vb int) int {
	v := s.vb
	if v == nil || vb < 0 || vb >= len(v.head) {
		return 0
	}
	// Under the stripe lock the items on vb's list are linked and their
	// keys cannot change: the handles are collected with their keys'
	// hashes, which name the shard to lock for each.
	type ref struct {
		h    uint32
		hash uint64
	}
	m := &v.mu[vb%vbStripes]
	m.Lock()
	refs := make([]ref, 0, v.count[vb])
	for h := v.head[vb]; h != 0; h = uint32(*s.linkOf(h)) {
		refs = append(refs, ref{h, s.keyHash(s.hdr(h))})
	}
	m.Unlock()
	dropped := 0
	for _, r := range refs {
		sh := s.shardOf(r.hash)
		sh.mu.Lock()
		// The chunk may have been freed and reused since: it is dropped if
		// it is still indexed where its key was and still holds an item of
		// vb (maybe a newer copy of the key, or another key of vb in the
		// same bucket: either goes, which is what dropping vb means).
		if b := bucket(sh, r.hash); s.inChainLocked(sh, b, r.h) && int(*s.vbOf(r.h)) == vb {
			it := s.hdr(r.h)
			c := &s.classes[it.class()]
			s.unlinkIndexLocked(sh, b, r.h, it)
			c.mu.Lock()
			s.unlinkLRULocked(c, r.h, it)
			s.freeLocked(c, r.h, it)
			c.mu.Unlock()
			dropped++
		}
		sh.mu.Unlock()
	}
	return dropped
}
