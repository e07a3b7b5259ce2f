package store

import "unsafe"

// Lending item memory (Store.Borrow). A connection that must buffer more
// of a request than its fixed read buffer holds (a value of tens of
// kilobytes to ItemSizeMax still arriving) borrows a chunk of the slab
// class that fits it, as memcached reads a value straight into the item it
// allocated: the bytes count against -m like any item's, the allocation
// evicts from that class's LRU as a store would, and a node full of
// half-sent values answers "out of memory" instead of growing past its
// limit. Loans may take at most half of the limit (one loan whatever its
// size): the other half stays for the items, so that clients that hold
// their values back cannot evict every item and leave no room for anyone
// else's. A borrowed chunk is neither free nor linked: it carries
// stBorrowed, eviction never sees it (it is on no LRU list), and a page
// holding one is not drained for another class until it comes back.

// borrowHdr is the header a borrowed chunk keeps: the state word that the
// drainer and the free list read (the rest of the header is unused).
const borrowHdr = hdrSize

// noTx is the Tx an eviction is told to when Borrow has none: no OnEvict.
var noTx Tx

// BorrowMax returns the largest n that Borrow can lend.
func (s *Store) BorrowMax() int {
	return int(s.sizes[len(s.sizes)-1]) - borrowHdr
}

// Borrow lends at least n bytes of item memory, counted against the
// memory limit until Return, and returns them with the loan to give back.
// It evicts as storing an item of that size would; evictions are told to
// tx's OnEvict callback (tx may be nil). It returns ErrTooLarge if n is
// above BorrowMax and ErrNoMemory when no chunk can be had (-M, every
// chunk busy, or half the limit lent already). The caller must not hold a Tx (lock order). The bytes hold
// garbage.
func (s *Store) Borrow(tx *Tx, n int) ([]byte, Loan, error) {
	if n < 0 || n > s.BorrowMax() {
		return nil, Loan{}, ErrTooLarge
	}
	if tx == nil {
		tx = &noTx
	}
	c := &s.classes[s.classFor(n+borrowHdr)]
	s.pageMu.Lock()
	if s.lent > 0 && s.lent+int64(c.size) > s.limit/2 {
		s.pageMu.Unlock()
		return nil, Loan{}, ErrNoMemory
	}
	s.lent += int64(c.size)
	s.pageMu.Unlock()
	h, err := s.alloc(c, nil, 0, s.nowLatched(), tx)
	if err != nil {
		s.pageMu.Lock()
		s.lent -= int64(c.size)
		s.pageMu.Unlock()
		return nil, Loan{}, err
	}
	it := s.hdr(h)
	it.state.Store(stateFor(stBorrowed, c.id, 0))
	p := unsafe.Add(unsafe.Pointer(it), borrowHdr)
	return unsafe.Slice((*byte)(p), int(c.size)-borrowHdr), Loan{h: h}, nil
}

// Loan is memory lent by Borrow; its zero value lends nothing.
type Loan struct{ h uint32 }

// Lent reports whether l holds memory.
func (l Loan) Lent() bool { return l.h != 0 }

// Return gives back the memory of a loan (the bytes must no longer be
// used); returning the zero Loan does nothing.
func (s *Store) Return(l Loan) {
	if l.h == 0 {
		return
	}
	it := s.hdr(l.h)
	c := &s.classes[it.class()]
	c.mu.Lock()
	it.state.Store(0)
	s.freeLocked(c, l.h, it)
	if s.cfg.VerifyFrees {
		s.checkClassLocked(c)
	}
	c.mu.Unlock()
	s.pageMu.Lock()
	s.lent -= int64(c.size)
	s.pageMu.Unlock()
}
