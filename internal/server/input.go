package server

import (
	"github.com/vbcache/vbcache/internal/store"
)

// Input memory under -m. memcached reads a value straight into the item it
// allocated from its slabs, so a client that sends a large value and stops
// short holds item memory, within -m, and a node out of it answers "out of
// memory" instead. A connection here reads into its fixed buffer (base,
// readBufSize) and parses in place; a request that must be buffered whole
// and is bigger than that (a value, a SASL or cluster-control body, a long
// multi-get line) gets a bigger buffer whose memory is counted:
//
//   - up to the largest slab chunk, a loan of store memory (store.Borrow):
//     it counts against -m like the item it will become, evicting in its
//     class as a store would;
//   - when no loan can be had (a value near -I with its command line is
//     larger than any chunk; half of -m is lent already; the store has
//     nothing to lend), heap bytes counted in Server.heapIn, at most
//     maxHeapInput over all connections. With -M the heap comes first:
//     a loan would take the chunk its own item then needs, and the
//     store cannot evict to find another (memcached, reading into the
//     item, needs one chunk, not two).
//
// A storage command that cannot get its buffer is refused as memcached
// refuses an item it cannot allocate ("SERVER_ERROR out of memory storing
// object", binary "Out of memory") and its data is swallowed; other
// requests close the connection, as memcached does when it cannot grow
// its read buffer. The buffer goes back as soon as the connection has
// consumed what it holds. So a node's memory is -m plus readBufSize per
// connection plus maxHeapInput, whatever clients send. A loan costs the
// cache one chunk of the value's class for as long as the value takes to
// arrive (memcached's read-in-place costs none): with eviction, one item
// more is evicted per value in flight.

// maxHeapInput bounds the input buffers, over all connections, that are
// too large to be lent from the store.
const maxHeapInput = 8 << 20

// roomFor reports whether the input buffer can take the n bytes a request
// waits for at rest (a suffix of the unread input), getting a bigger
// buffer when it must (room).
func (c *conn) roomFor(rest []byte, n int) bool {
	return c.room(c.w - c.r - len(rest) + n)
}

// room reports whether need bytes from c.r fit in the input buffer, or in
// a bigger one it gets now for makeRoom to install. false means there is
// no memory for them.
func (c *conn) room(need int) bool {
	if need <= len(c.rbuf) || c.base == nil || need <= len(c.next) {
		return true // UDP: a datagram is whole
	}
	c.dropNext()
	// With -M a loan would take the chunk its own item then needs (the
	// store cannot evict to find another): the heap comes first there.
	noEvict := c.s.cfg.Store.NoEvict
	if noEvict && c.heapRoom(need) {
		return true
	}
	if need <= c.s.store.BorrowMax() {
		if b, l, err := c.s.store.Borrow(&c.tx, need); err == nil {
			c.next, c.nextLoan = b, l
			return true
		}
	}
	return !noEvict && c.heapRoom(need)
}

// heapRoom gets need bytes of heap for the input if Server.heapIn allows.
func (c *conn) heapRoom(need int) bool {
	if c.s.heapIn.Add(int64(need)) > maxHeapInput {
		c.s.heapIn.Add(-int64(need))
		return false
	}
	c.next, c.nextHeap = make([]byte, need), need
	return true
}

// growInput moves the unread input to a buffer of at least need bytes:
// the one room got, or one got now. Without memory for it (a request that
// did not ask room first) the connection closes.
func (c *conn) growInput(need int) {
	if need > len(c.next) && !c.room(need) {
		c.s.inputNoMemory.Add(1)
		c.close = true
		c.r, c.w = 0, 0
		return
	}
	nb := c.next
	c.w = copy(nb, c.rbuf[c.r:c.w])
	c.r = 0
	c.releaseInput()
	c.rbuf, c.loan, c.heap = nb, c.nextLoan, c.nextHeap
	c.next, c.nextLoan, c.nextHeap = nil, store.Loan{}, 0
}

// shrinkInput goes back to the fixed buffer once nothing is buffered.
func (c *conn) shrinkInput() {
	c.releaseInput()
	c.rbuf = c.base
}

// releaseInput gives back the memory of the current input buffer, if it
// is not the fixed one; rbuf must be replaced.
func (c *conn) releaseInput() {
	c.s.store.Return(c.loan)
	if c.heap > 0 {
		c.s.heapIn.Add(-int64(c.heap))
	}
	c.rbuf, c.loan, c.heap = nil, store.Loan{}, 0
}

// dropNext gives back a bigger buffer got but not installed.
func (c *conn) dropNext() {
	c.s.store.Return(c.nextLoan)
	if c.nextHeap > 0 {
		c.s.heapIn.Add(-int64(c.nextHeap))
	}
	c.next, c.nextLoan, c.nextHeap = nil, store.Loan{}, 0
}

// freeInput gives back every buffer when the connection ends.
func (c *conn) freeInput() {
	if c.base == nil {
		return
	}
	c.dropNext()
	c.releaseInput()
}

// Output. Replies are copied into the connection's output buffer (out),
// which is written once a batch of commands is served or it reaches
// flushAt between commands. One classic multi-get is one command, though,
// and memcached's answer to it points at the items while ours copies them:
// "get k k k …" naming a 1 MB item a thousand times would ask for a
// gigabyte. So a get or gets writes its replies whenever they pass flushAt,
// in the middle of the command (every key is checked against the vbucket
// table as it is reached, so nothing needs holding back; a key that fails
// after a write is answered with its error after the values already sent,
// which a client reads as the command's failure). gat and gats, which
// change items (synchronous replication holds their replies), and UDP
// replies are held whole instead: what their output buffer grows past
// flushAt is counted in Server.outHeap, at most maxOutput over all
// connections, and a command that would pass it is refused with
// memcached's own answer for a get it cannot build, "SERVER_ERROR out of
// memory writing get response", its replies dropped (as memcached drops
// its stacked responses). The count ends when the buffer is written; a
// buffer more than twice flushAt is then given up, so a connection keeps
// at most that much between commands.

// maxOutput bounds the output buffers past flushAt of all connections:
// an eighth of -m, and at least 64 MiB (Config.outputFloor in tests).
func (s *Server) maxOutput() int64 {
	floor := int64(64 << 20)
	if s.cfg.outputFloor > 0 {
		floor = s.cfg.outputFloor
	}
	return max(floor, s.limitMaxbytes.Load()/8)
}

// outRoom counts the growth of c.out past flushAt against maxOutput and
// reports whether it is within it.
func (c *conn) outRoom() bool {
	grown := int64(cap(c.out) - flushAt)
	if grown <= c.outCounted {
		return true
	}
	d := grown - c.outCounted
	if c.s.outHeap.Add(d) > c.s.maxOutput() {
		c.s.outHeap.Add(-d)
		return false
	}
	c.outCounted = grown
	return true
}

// dropOut ends the count of c.out's growth (what it holds is written or
// dropped) and keeps its first n bytes; a buffer grown past twice flushAt
// is given up, so that what a connection keeps between commands is at
// most that.
func (c *conn) dropOut(n int) {
	c.s.outHeap.Add(-c.outCounted)
	c.outCounted = 0
	switch {
	case cap(c.out) <= 2*flushAt:
		c.out = c.out[:n]
	case n == 0:
		c.out = nil
	default:
		c.out = append(make([]byte, 0, max(n, flushAt)), c.out[:n]...)
	}
}
