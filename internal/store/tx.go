package store

import (
	"hash/maphash"
	"math"
)

// begin implements Store.Begin.
func (s *Store) begin(tx *Tx, key []byte) Outcome {
	hash := maphash.Bytes(s.seed, key)
	now := s.now()
	s.latchDue(now) // nowLatched by hand (it does not inline): see latchDue
	sh := &s.shards[hash&s.shardMask]
	sh.mu.Lock()
	tx.s, tx.sh, tx.key, tx.hash, tx.now = s, sh, key, hash, now
	h, it := s.lookupLocked(sh, hash, key)
	if h == 0 {
		tx.cur, tx.it, tx.cls = 0, nil, nil
		return Miss
	}
	if out := s.deadLocked(it, now); out != Hit {
		c := &s.classes[it.class()]
		s.unlinkIndexLocked(sh, bucket(sh, hash), h, it)
		c.mu.Lock()
		if out == Expired {
			c.st.reclaimed++
			if !it.has(stFetched) {
				c.st.expiredUnfetched++
			}
		}
		if out == Expired && s.vb != nil {
			tx.observe(MutExpire, h, it)
		}
		s.unlinkLRULocked(c, h, it)
		s.freeLocked(c, h, it)
		c.mu.Unlock()
		tx.cur, tx.it, tx.cls = 0, nil, nil
		return out
	}
	tx.cur, tx.it, tx.cls = h, it, &s.classes[it.class()]
	return Hit
}

func (tx *Tx) end() {
	tx.sh.mu.Unlock()
	tx.sh, tx.key, tx.cur, tx.it, tx.cls = nil, nil, 0, nil, nil
}

// bump implements Tx.Bump: only atomics and the shard lock, never a class lock.
func (tx *Tx) bump() {
	it := tx.it
	if it == nil {
		return
	}
	const bits = stFetched | stActive
	st := it.state.Load()
	if st&bits != bits {
		it.state.Or(bits)
	}
	if it.atime.Load() != tx.now {
		it.atime.Store(tx.now)
	}
	tx.sh.hits[int(uint8(st>>classShift))*nSegs+int(st&segMask)>>segShift]++
}

// store implements Tx.Store.
func (tx *Tx) store(flags uint32, exptime uint32, cas uint64, a, b []byte) error {
	s := tx.s
	nbytes := len(a) + len(b)
	total := itemSize(len(tx.key), nbytes)
	if total > s.cfg.ItemSizeMax || len(tx.key) > math.MaxUint8 {
		return ErrTooLarge
	}
	c := &s.classes[s.classFor(total)] // the smallest chunk that holds it
	h, err := s.alloc(c, tx.sh, tx.cur, tx.now, tx)
	if err != nil {
		return err
	}
	it := s.hdr(h)
	// Begin latched a delayed flush_all due at tx.now, so the sequence
	// taken here is above it if this store is at or after its moment.
	if cas == 0 || s.cfg.DisableCAS {
		// With CAS disabled the counter still orders items for flush_all;
		// Tx.CAS reports 0.
		cas = s.casSeq.Add(1)
	}
	it.hnext = 0
	it.exptime = exptime
	it.atime.Store(tx.now)
	it.flags = flags
	it.nbytes = uint32(nbytes)
	it.state.Store(stateFor(0, c.id, len(tx.key))) // the chunk is ours alone until linked
	if s.vb != nil {
		*s.vbOf(h) = tx.vb
	}
	it.cas = cas
	copy(it.key(), tx.key)
	v := it.value()
	copy(v[copy(v, a):], b)

	old, oit, oc := tx.cur, tx.it, tx.cls
	if old != 0 {
		s.replaceIndexLocked(tx.sh, tx.hash, old, h, it)
	} else {
		s.insertIndexLocked(tx.sh, tx.hash, h, it)
	}
	seg, flat := segHot, s.flat.Load()
	if flat {
		seg = segCold
	}
	c.mu.Lock()
	s.linkLRULocked(c, h, it, seg)
	it.state.Or(stLinked)
	if s.vb != nil {
		s.vbLink(h, it)
	}
	c.st.totalItems++
	c.requested += uint64(it.size())
	if !flat {
		s.balanceLocked(c)
	}
	if old != 0 && oc == c {
		s.unlinkLRULocked(c, old, oit)
		s.freeLocked(c, old, oit)
		old = 0
	}
	if s.cfg.VerifyFrees {
		s.checkClassLocked(c)
	}
	c.mu.Unlock()
	if old != 0 {
		oc.mu.Lock()
		s.unlinkLRULocked(oc, old, oit)
		s.freeLocked(oc, old, oit)
		if s.cfg.VerifyFrees {
			s.checkClassLocked(oc)
		}
		oc.mu.Unlock()
	}
	tx.cur, tx.it, tx.cls = h, it, c
	if s.vb != nil {
		tx.observe(MutStore, h, it)
	}
	return nil
}

// overwrite implements Tx.Overwrite.
func (tx *Tx) overwrite(v []byte) bool {
	it := tx.it
	if it == nil || len(v) > int(it.nbytes) {
		return false
	}
	dst := it.value()
	n := copy(dst, v)
	for i := n; i < len(dst); i++ {
		dst[i] = ' '
	}
	it.cas = tx.s.casSeq.Add(1) // fresh even when CAS is disabled: it orders flush_all
	if tx.s.vb != nil {
		tx.observe(MutStore, tx.cur, it)
	}
	return true
}

// delete implements Tx.Delete.
func (tx *Tx) delete() {
	it := tx.it
	if it == nil {
		return
	}
	s, c := tx.s, tx.cls
	if s.vb != nil {
		tx.observe(MutDelete, tx.cur, it)
	}
	s.unlinkIndexLocked(tx.sh, bucket(tx.sh, tx.hash), tx.cur, it)
	c.mu.Lock()
	s.unlinkLRULocked(c, tx.cur, it)
	s.freeLocked(c, tx.cur, it)
	if s.cfg.VerifyFrees {
		s.checkClassLocked(c)
	}
	c.mu.Unlock()
	tx.cur, tx.it, tx.cls = 0, nil, nil
}

func (s *Store) nextCAS() uint64 {
	if s.cfg.DisableCAS {
		return 0
	}
	return s.casSeq.Add(1)
}

// classFor returns the smallest class whose chunk holds total bytes; the
// caller has checked total <= ItemSizeMax.
func (s *Store) classFor(total int) int {
	lo, hi := 1, len(s.sizes)-1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if int(s.sizes[m]) < total {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
