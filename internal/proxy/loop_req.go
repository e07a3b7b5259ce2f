package proxy

import (
	"unsafe"

	"github.com/vbcache/vbcache/internal/protocol"
)

// A loop's requests (loop.go): a client request split by server into
// fragments on the server connections, and its reply once they are
// answered.

func (l *ploop) newReq(c *conn) *lreq {
	var r *lreq
	if n := len(l.free); n > 0 {
		r = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		r = new(lreq)
	}
	r.c = c
	c.lq = append(c.lq, r)
	l.p.ctr.fastPath.Add(1)
	return r
}

func (l *ploop) freeReq(r *lreq) {
	*r = lreq{out: r.out[:0], kb: r.kb[:0], kend: r.kend[:0], order: r.order[:0], blk: r.blk[:0], vals: r.vals[:0], srv: r.srv[:0]}
	if cap(r.out) > 1<<20 {
		r.out = nil
	}
	if cap(r.vals) > 1<<20 {
		r.vals = nil
	}
	l.free = append(l.free, r)
}

// pick returns the loop's connection to key's server, or the error.
func (l *ploop) pick(c *conn, key []byte) (*lup, error) {
	addr, err := l.gen.sel.PickServer(unsafe.String(unsafe.SliceData(key), len(key)))
	if err != nil {
		return nil, err
	}
	ups := l.ups[addr]
	if ups == nil {
		ups = make([]*lup, l.gen.cfg.conns())
		l.ups[addr] = ups
	}
	i := c.lconnIx % len(ups)
	up := ups[i]
	if up == nil {
		up = &lup{u: l.gen, addr: addr, st: l.gen.byAddr[addr], fd: -1}
		if up.st == nil {
			up.st = l.gen.st.get(addr.String())
		}
		ups[i] = up
		l.all = append(l.all, up)
	}
	return up, nil
}

// startGet starts a get or gets of t's keys.
func (l *ploop) startGet(c *conn, t *protocol.Tokens, gets bool) {
	r := l.newReq(c)
	r.nkeys = t.N - 2
	verb := "get "
	if gets {
		verb = "gets "
	}
	if r.nkeys == 1 {
		up, err := l.pick(c, t.T[1])
		if err != nil {
			l.failEarly(r, t.T[1], err)
			return
		}
		up.wbuf = append(up.wbuf, verb...)
		up.wbuf = append(up.wbuf, t.T[1]...)
		up.wbuf = append(up.wbuf, '\r', '\n')
		l.push(up, r, 0, 0)
		return
	}
	// Several keys: find each one's server.
	for i := 1; i < t.N-1; i++ {
		up, err := l.pick(c, t.T[i])
		if err != nil {
			l.failEarly(r, t.T[i], err)
			return
		}
		r.srv = append(r.srv, up)
		r.kb = append(r.kb, t.T[i]...)
		r.kend = append(r.kend, int32(len(r.kb)))
	}
	first := r.srv[0]
	r.split = false
	for _, up := range r.srv[1:] {
		if up != first {
			r.split = true
			break
		}
	}
	if !r.split {
		first.wbuf = append(first.wbuf, verb[:len(verb)-1]...)
		for i := 1; i < t.N-1; i++ {
			first.wbuf = append(first.wbuf, ' ')
			first.wbuf = append(first.wbuf, t.T[i]...)
		}
		first.wbuf = append(first.wbuf, '\r', '\n')
		l.push(first, r, 0, 0)
		return
	}
	for range r.nkeys {
		r.blk = append(r.blk, span{off: -1})
	}
	for i, up := range r.srv {
		if up == nil {
			continue // taken by an earlier server's fragment
		}
		lo := int32(len(r.order))
		up.wbuf = append(up.wbuf, verb[:len(verb)-1]...)
		for j := i; j < len(r.srv); j++ {
			if r.srv[j] != up {
				continue
			}
			r.srv[j] = nil
			r.order = append(r.order, int32(j))
			up.wbuf = append(up.wbuf, ' ')
			up.wbuf = append(up.wbuf, r.key(j)...)
		}
		up.wbuf = append(up.wbuf, '\r', '\n')
		l.push(up, r, lo, int32(len(r.order)))
	}
}

// key is a split get's key i.
func (r *lreq) key(i int) []byte {
	from := int32(0)
	if i > 0 {
		from = r.kend[i-1]
	}
	return r.kb[from:r.kend[i]]
}

// startStore starts a set, add or replace; data is the value with its
// "\r\n".
func (l *ploop) startStore(c *conn, t *protocol.Tokens, data []byte) {
	r := l.newReq(c)
	r.store = true
	r.noreply = string(t.T[t.N-2]) == "noreply"
	l.p.ctr.cmdSet.Add(1)
	up, err := l.pick(c, t.T[1])
	if err != nil {
		l.failEarly(r, t.T[1], err)
		return
	}
	for i := 0; i < 5; i++ {
		up.wbuf = append(up.wbuf, t.T[i]...)
		if i < 4 {
			up.wbuf = append(up.wbuf, ' ')
		}
	}
	up.wbuf = append(up.wbuf, '\r', '\n')
	up.wbuf = append(up.wbuf, data...)
	l.push(up, r, 0, 0)
}

// push queues a request fragment on up, to be written this round.
func (l *ploop) push(up *lup, r *lreq, lo, hi int32) {
	if up.qh == len(up.q) {
		up.deadline = l.now.Add(up.u.timeout)
	}
	up.q = append(up.q, lfrag{r: r, lo: lo, hi: hi, start: l.now})
	r.frags++
	l.inflight++
	if !up.inWQ {
		up.inWQ = true
		l.wq = append(l.wq, up)
	}
}

// failEarly answers a request that could not be sent (no server).
func (l *ploop) failEarly(r *lreq, key []byte, err error) {
	r.fail(failReply(l.gen, string(key), err)) // allocates: rare
	l.finish(r)
}

// fail makes r's reply the failure line s (the first failure wins).
func (r *lreq) fail(s string) {
	if r.failed {
		return
	}
	r.failed = true
	r.out = append(r.out[:0], s...)
	r.out = append(r.out, '\r', '\n')
}

// fragDone ends one fragment of r; the last one finishes r.
func (l *ploop) fragDone(r *lreq) {
	r.frags--
	l.inflight--
	if r.frags == 0 {
		l.finish(r)
	}
}

// finish completes r: its reply, and those after it that are complete,
// go to the client in order.
func (l *ploop) finish(r *lreq) {
	c := r.c
	if !r.store {
		l.p.ctr.cmdGet.Add(int64(r.nkeys))
		l.p.ctr.getHits.Add(int64(r.hits))
		l.p.ctr.getMisses.Add(int64(r.nkeys - r.hits))
		if !r.failed {
			if r.split {
				for _, b := range r.blk {
					if b.off >= 0 {
						r.out = append(r.out, r.vals[b.off:b.off+b.n]...)
					}
				}
			}
			r.out = append(r.out, "END\r\n"...)
		}
	} else if r.noreply {
		r.out = r.out[:0]
	}
	if c == nil {
		l.freeReq(r)
		return
	}
	r.done = true
	for c.lqh < len(c.lq) && c.lq[c.lqh].done {
		h := c.lq[c.lqh]
		c.lq[c.lqh] = nil
		c.lqh++
		c.out = append(c.out, h.out...)
		l.freeReq(h)
	}
	if c.lqh == len(c.lq) {
		c.lq, c.lqh = c.lq[:0], 0
	}
	if len(c.out) > 0 {
		l.toCQ(c)
	}
	l.settled(c)
}
