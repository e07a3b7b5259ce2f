package store

// Additions to the contract in api.go, made by the server's author after
// the first draft.

import "errors"

// Errors returned by Reassign, worded after memcached's "slabs reassign"
// answers.
var (
	ErrBadClass  = errors.New("store: invalid src or dst class id")
	ErrSameClass = errors.New("store: src and dst class are identical")
	ErrNoSpare   = errors.New("store: source class has no spare pages")
)

// Exptime returns the held item's expiry as store time (0: never), the
// form Store and Touch take, so that a command that rewrites an item can
// keep its expiry exactly.
func (tx *Tx) Exptime() uint32 {
	if tx.it == nil {
		return 0
	}
	return tx.it.exptime
}

// SetVBucket names the vbucket of the items this Tx stores from now on
// (until changed): the server calls it once it has admitted a request.
func (tx *Tx) SetVBucket(vb uint16) { tx.vb = vb }

// DropVBucket deletes every item of vbucket vb and returns how many, in
// time proportional to that vbucket's items (Config.VBuckets > 0; else 0).
// Items stored into vb while the drop runs may survive it: the caller
// makes the vbucket dead first.
func (s *Store) DropVBucket(vb int) int { return s.dropVBucket(vb) }

// VBucketItems returns the number of items in vbucket vb (0 without
// Config.VBuckets).
func (s *Store) VBucketItems(vb int) uint64 {
	n, _ := s.VBucketUsage(vb)
	return n
}

// VBucketUsage returns the number of items in vbucket vb and the sum of
// their sizes as Tx.Size gives them (zeros without Config.VBuckets).
func (s *Store) VBucketUsage(vb int) (items, bytes uint64) {
	v := s.vb
	if v == nil || vb < 0 || vb >= len(v.count) {
		return 0, 0
	}
	m := &v.mu[vb%vbStripes]
	m.Lock()
	defer m.Unlock()
	return v.count[vb], v.bytes[vb]
}

// KeyBinary reports whether the held item's key was stored base64-encoded
// by a meta command (its "b" flag), so that meta replies re-encode it.
func (tx *Tx) KeyBinary() bool { return tx.it != nil && tx.it.has(stBinary) }

// SetKeyBinary sets the held item's binary-key bit.
func (tx *Tx) SetKeyBinary(v bool) {
	if tx.it != nil {
		tx.it.setBit(stBinary, v)
	}
}

// Reassign moves one page from class src to class dst ("slabs reassign";
// src -1 means any class with a page to spare), evicting the items on it.
func (s *Store) Reassign(src, dst int) error { return s.reassign(src, dst) }

// SetLRU changes the LRU split at run time ("lru tune" and "lru mode"):
// the HOT and WARM percentages and whether the LRU is flat.
func (s *Store) SetLRU(hotPct, warmPct int, flat bool) {
	s.hotPct.Store(int32(hotPct))
	s.warmPct.Store(int32(warmPct))
	s.flat.Store(flat)
}
