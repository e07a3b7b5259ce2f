package server

import "sync/atomic"

// maxClasses bounds the slab class ids the per-class counters track
// (memcached's MAX_NUMBER_OF_SLAB_CLASSES is 64, ids 1..63).
const maxClasses = 64

// counterShards spreads the request counters over several cache lines so
// that connections on different cores rarely touch the same one. A
// connection always uses shard id%counterShards.
const counterShards = 16

// classCounters are memcached's per-slab-class thread stats (stats slabs).
type classCounters struct {
	getHits, cmdSet, deleteHits, incrHits, decrHits, casHits, casBadval, touchHits atomic.Uint64
}

// counters are one shard of the request counters behind "stats". Every
// field is an atomic so that "stats" can read them while connections count.
type counters struct {
	cmdGet, cmdTouch, cmdMeta, cmdFlush             atomic.Uint64
	getMisses, getExpired, getFlushed               atomic.Uint64
	deleteMisses, incrMisses, decrMisses, casMisses atomic.Uint64
	touchMisses, storeTooLarge, storeNoMemory       atomic.Uint64
	authCmds, authErrors                            atomic.Uint64
	bytesRead, bytesWritten, connYields             atomic.Uint64
	lruHits                                         [maxClasses]atomic.Uint64
	class                                           [maxClasses]classCounters
	_                                               [64]byte // keep shards on separate cache lines
}

// totals is a plain snapshot of all shards added up.
type totals struct {
	cmdGet, cmdTouch, cmdMeta, cmdFlush             uint64
	getHits, getMisses, getExpired, getFlushed      uint64
	deleteMisses, incrMisses, decrMisses, casMisses uint64
	touchMisses, storeTooLarge, storeNoMemory       uint64
	authCmds, authErrors                            uint64
	bytesRead, bytesWritten, connYields             uint64
	cmdSet, deleteHits, incrHits, decrHits          uint64
	casHits, casBadval, touchHits                   uint64
	class                                           [maxClasses]classTotals
}

type classTotals struct {
	getHits, cmdSet, deleteHits, incrHits, decrHits, casHits, casBadval, touchHits uint64
}

func (s *Server) sumCounters(t *totals) {
	for i := range s.counters {
		c := &s.counters[i]
		t.cmdGet += c.cmdGet.Load()
		t.cmdTouch += c.cmdTouch.Load()
		t.cmdMeta += c.cmdMeta.Load()
		t.cmdFlush += c.cmdFlush.Load()
		t.getMisses += c.getMisses.Load()
		t.getExpired += c.getExpired.Load()
		t.getFlushed += c.getFlushed.Load()
		t.deleteMisses += c.deleteMisses.Load()
		t.incrMisses += c.incrMisses.Load()
		t.decrMisses += c.decrMisses.Load()
		t.casMisses += c.casMisses.Load()
		t.touchMisses += c.touchMisses.Load()
		t.storeTooLarge += c.storeTooLarge.Load()
		t.storeNoMemory += c.storeNoMemory.Load()
		t.authCmds += c.authCmds.Load()
		t.authErrors += c.authErrors.Load()
		t.bytesRead += c.bytesRead.Load()
		t.bytesWritten += c.bytesWritten.Load()
		t.connYields += c.connYields.Load()
		for k := range c.class {
			cc := &c.class[k]
			ct := &t.class[k]
			ct.getHits += c.lruHits[k].Load()
			ct.cmdSet += cc.cmdSet.Load()
			ct.deleteHits += cc.deleteHits.Load()
			ct.incrHits += cc.incrHits.Load()
			ct.decrHits += cc.decrHits.Load()
			ct.casHits += cc.casHits.Load()
			ct.casBadval += cc.casBadval.Load()
			ct.touchHits += cc.touchHits.Load()
		}
	}
	for k := range t.class {
		ct := &t.class[k]
		t.getHits += ct.getHits
		t.cmdSet += ct.cmdSet
		t.deleteHits += ct.deleteHits
		t.incrHits += ct.incrHits
		t.decrHits += ct.decrHits
		t.casHits += ct.casHits
		t.casBadval += ct.casBadval
		t.touchHits += ct.touchHits
	}
}

func (s *Server) resetCounters() {
	for i := range s.counters {
		c := &s.counters[i]
		for _, a := range []*atomic.Uint64{&c.cmdGet, &c.cmdTouch, &c.cmdMeta, &c.cmdFlush,
			&c.getMisses, &c.getExpired, &c.getFlushed, &c.deleteMisses, &c.incrMisses,
			&c.decrMisses, &c.casMisses, &c.touchMisses, &c.storeTooLarge, &c.storeNoMemory,
			&c.authCmds, &c.authErrors, &c.bytesRead, &c.bytesWritten, &c.connYields} {
			a.Store(0)
		}
		for k := range c.class {
			c.lruHits[k].Store(0)
			cc := &c.class[k]
			for _, a := range []*atomic.Uint64{&cc.getHits, &cc.cmdSet, &cc.deleteHits,
				&cc.incrHits, &cc.decrHits, &cc.casHits, &cc.casBadval, &cc.touchHits} {
				a.Store(0)
			}
		}
	}
}

func classIdx(id int) int {
	if id < 0 || id >= maxClasses {
		return 0
	}
	return id
}
