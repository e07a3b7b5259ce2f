package store

import (
	"sync/atomic"
	"unsafe"
)

// hdrSize is the size of an item header; the key follows it, then the value.
const hdrSize = 40

// mcItemHeader is sizeof(item) in memcached 1.6 on 64-bit machines. It
// only places the class grid where memcached's is: class 1's chunk is
// mcItemHeader + ChunkSizeMin (store.go), so that class ids and chunk sizes
// read as memcached's. Items themselves are sized by hdrSize (size) and go
// to the smallest chunk that holds them, which for most items is
// memcached's class or one below it.
const mcItemHeader = 48

// hdr is the item header at the start of every chunk. It is overlaid on slab
// memory and contains no Go pointers. Which lock protects each field is
// noted; "immutable" means written once before the item is linked (under the
// allocating Tx's shard lock, then published by the class lock taken to link
// it) and never changed while it is linked.
//
//	offset  field    bits
//	     0  prev     32  LRU (or free list) previous handle
//	     4  next     32  LRU (or free list) next handle
//	     8  hnext    32  hash chain next handle
//	    12  exptime  32  store time of expiry, 0 never
//	    16  atime    32  store time of last access
//	    20  state    32  bits 0-7 st* flags, 8-9 LRU segment, 10-15 unused,
//	                     16-23 class id, 24-31 key length
//	    24  flags    32  client flags
//	    28  nbytes   32  value length
//	    32  cas      64  CAS unique and store sequence
//	    40  key, then value
//
// The key's hash is not kept (keyHash computes it), nor the vbucket id
// (a side array of the page holds it, in cluster mode only: vbucket.go).
type hdr struct {
	prev    uint32        // LRU (or free list) previous handle: class lock
	next    uint32        // LRU (or free list) next handle: class lock
	hnext   uint32        // hash chain: shard lock
	exptime uint32        // store time of expiry, 0 never: shard lock
	atime   atomic.Uint32 // store time of last access: atomic
	state   atomic.Uint32 // st* bits and LRU segment (atomic); class id and key length above them (immutable)
	flags   uint32        // client flags: immutable
	nbytes  uint32        // value length: immutable
	cas     uint64        // CAS unique, also the store sequence for flush_all (kept when CAS is disabled): shard lock
}

// Compile-time check that hdr is exactly hdrSize bytes.
var _ [hdrSize - unsafe.Sizeof(hdr{})]struct{}
var _ [unsafe.Sizeof(hdr{}) - hdrSize]struct{}

// state bits. The low byte holds flags and the next two bits the LRU
// segment: these change while the item is linked, always by atomic Or, And
// or CompareAndSwap of those bits alone (setBit, setSeg), which leave the
// rest of the word as it is. The top two bytes hold the class id and key
// length, written by a plain Store of the whole word (stateFor) while no
// one else can see the chunk: when Tx.Store fills a chunk alloc handed it,
// and when Borrow lends one. A chunk going to the free list (pushFreeLocked,
// freeLocked) is stored stFree alone: a free chunk has no key and no class
// of its own.
const (
	stLinked  = 1 << 0 // in the index and an LRU list
	stFree    = 1 << 1 // on the class free list (or free in a draining page)
	stFetched = 1 << 2
	stActive  = 1 << 3
	stStale   = 1 << 4
	stToken   = 1 << 5
	stBinary  = 1 << 6 // key was base64 in a meta command
	// stBorrowed marks a chunk lent by Store.Borrow: it is on no list
	// and its page is not drained (borrow.go).
	stBorrowed = 1 << 7
	segShift   = 8
	segMask    = 3 << segShift
	classShift = 16 // class id: bits 16-23
	nkeyShift  = 24 // key length: bits 24-31
)

// stateFor is the state word of a chunk of class id whose key is nkey bytes
// long, with the st* bits bits.
func stateFor(bits uint32, class uint8, nkey int) uint32 {
	return bits | uint32(class)<<classShift | uint32(nkey)<<nkeyShift
}

// class returns the item's slab class id.
func (it *hdr) class() uint8 { return uint8(it.state.Load() >> classShift) }

// nkey returns the item's key length.
func (it *hdr) nkey() int { return int(it.state.Load() >> nkeyShift) }

// LRU segments.
const (
	segHot = iota
	segWarm
	segCold
	nSegs
)

func (it *hdr) seg() int { return int(it.state.Load()&segMask) >> segShift }

func (it *hdr) setSeg(seg int) {
	for {
		old := it.state.Load()
		n := old&^segMask | uint32(seg)<<segShift
		if it.state.CompareAndSwap(old, n) {
			return
		}
	}
}

func (it *hdr) has(bit uint32) bool { return it.state.Load()&bit != 0 }

func (it *hdr) setBit(bit uint32, v bool) {
	if v {
		it.state.Or(bit)
	} else {
		it.state.And(^bit)
	}
}

func (it *hdr) key() []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(it), hdrSize)), it.nkey())
}

func (it *hdr) value() []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(it), hdrSize+it.nkey())), int(it.nbytes))
}

// size is the item's size: header, key and value, the bytes of its chunk
// it uses (itemSize).
func (it *hdr) size() int { return itemSize(it.nkey(), int(it.nbytes)) }

// itemSize is the size of an item with an nkey-byte key and an nbytes-byte
// value: what decides its class, what counts against ItemSizeMax, and what
// mem_requested, "bytes", Tx.Size and the dumps' sizes add up.
func itemSize(nkey, nbytes int) int { return hdrSize + nkey + nbytes }

// pageSlot describes one slab page.
type pageSlot struct {
	base     unsafe.Pointer // &buf[0]
	buf      []byte         // keeps the page alive; nil when released
	csize    uint32         // chunk size of the owning class
	class    uint8          // owning class id
	draining bool           // being emptied for another class (owning class lock)
	links    []uint64       // per chunk prev<<32|next on its vbucket list (VBuckets > 0 only; see vbucket.go)
	vbs      []uint16       // per chunk the vbucket id of its item (VBuckets > 0 only; immutable while the item is linked, like the header's)
}

const (
	groupBits = 10
	groupMask = 1<<groupBits - 1
)

type pageGroup [1 << groupBits]pageSlot

func (s *Store) slot(p uint32) *pageSlot { return &s.dir[p>>groupBits][p&groupMask] }

// hdr returns the header of the chunk at handle h.
func (s *Store) hdr(h uint32) *hdr {
	p := h >> s.chunkBits
	sl := &s.dir[p>>groupBits][p&groupMask]
	return (*hdr)(unsafe.Add(sl.base, uintptr(h&s.chunkMask)*uintptr(sl.csize)))
}
