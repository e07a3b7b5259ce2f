package proxy

import (
	"bytes"
	"net"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/memcache"
)

// A loop's requests (loop.go): a client request split by server into
// fragments on the server connections, and its reply once they are
// answered.

func (l *ploop) newReq(c *conn) *lreq {
	l.p.ctr.fastPath.Add(1)
	return l.takeReq(c)
}

// takeReq is newReq without counting the request in proxy_fast_path:
// stats requests, so that reading it does not change it.
func (l *ploop) takeReq(c *conn) *lreq {
	var r *lreq
	if n := len(l.free); n > 0 {
		r = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		r = new(lreq)
	}
	r.c, r.born = c, l.now
	c.lq = append(c.lq, r)
	return r
}

func (l *ploop) freeReq(r *lreq) {
	*r = lreq{out: r.out[:0], kb: r.kb[:0], kend: r.kend[:0], order: r.order[:0], blk: r.blk[:0], vals: r.vals[:0], srv: r.srv[:0],
		sent: r.sent[:0], verb: r.verb[:0]}
	if cap(r.out) > 1<<20 {
		r.out = nil
	}
	if cap(r.sent) > 1<<20 {
		r.sent = nil
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
	return l.pickAddr(c, addr), nil
}

// pickAddr returns the loop's connection for c to the server at addr.
func (l *ploop) pickAddr(c *conn, addr net.Addr) *lup {
	// A server's text connections, then its binary ones (a binary
	// client's requests go to the server in binary).
	ups := l.ups[addr]
	if ups == nil {
		ups = make([]*lup, 2*l.gen.cfg.conns())
		l.ups[addr] = ups
	}
	n := len(ups) / 2
	i := c.lconnIx % n
	if c.mode == 2 {
		i += n
	}
	up := ups[i]
	if up == nil {
		up = &lup{u: l.gen, addr: addr, st: l.gen.byAddr[addr], fd: -1, bin: c.mode == 2}
		if up.st == nil {
			up.st = l.gen.st.get(addr.String())
		}
		ups[i] = up
		l.all = append(l.all, up)
	}
	return up
}

// startGet starts a get, gets, gat or gats of r's keys: T[First:N-1],
// then those of the rest of the line (NextKeys). Each server is sent the
// command's verb (and a gat's exptime) with the keys it holds.
func (l *ploop) startGet(c *conn, r *protocol.TextRequest) {
	t := &r.Tokens
	q := l.newReq(c)
	q.cmd = r.Cmd
	// The tokens are slices of the line, which stays put: these outlive
	// NextKeys.
	verbTok, expTok := t.T[0], []byte(nil)
	if r.First == 2 {
		expTok = t.T[1]
	}
	verb := func(up *lup) {
		up.wbuf = append(up.wbuf, verbTok...)
		if expTok != nil {
			up.wbuf = append(up.wbuf, ' ')
			up.wbuf = append(up.wbuf, expTok...)
		}
	}
	if l.gen.cluster {
		// The keys, each VALUE block kept by key, and a first send
		// (sendGet) that retries can repeat.
		q.verb = append(q.verb[:0], verbTok...)
		if expTok != nil {
			q.verb = append(q.verb, ' ')
			q.verb = append(q.verb, expTok...)
		}
		for first := r.First; ; first = 0 {
			for i := first; i < t.N-1; i++ {
				q.kb = append(q.kb, t.T[i]...)
				q.kend = append(q.kend, int32(len(q.kb)))
			}
			if !r.NextKeys() {
				break
			}
		}
		q.nkeys, q.split = len(q.kend), true
		for i := range q.nkeys {
			q.blk = append(q.blk, span{off: -1})
			q.order = append(q.order, int32(i))
		}
		l.sendGet(q, 0, int32(q.nkeys))
		return
	}
	if t.N-1-r.First == 1 && t.Rest == nil {
		q.nkeys = 1
		up, err := l.pick(c, t.T[r.First])
		if err != nil {
			l.failEarly(q, t.T[r.First], err)
			return
		}
		verb(up)
		up.wbuf = append(up.wbuf, ' ')
		up.wbuf = append(up.wbuf, t.T[r.First]...)
		up.wbuf = append(up.wbuf, '\r', '\n')
		l.push(up, q, 0, 0)
		return
	}
	// Several keys: find each one's server.
	for first := r.First; ; first = 0 {
		for i := first; i < t.N-1; i++ {
			up, err := l.pick(c, t.T[i])
			if err != nil {
				l.failEarly(q, t.T[i], err)
				return
			}
			q.srv = append(q.srv, up)
			q.kb = append(q.kb, t.T[i]...)
			q.kend = append(q.kend, int32(len(q.kb)))
		}
		if !r.NextKeys() {
			break
		}
	}
	q.nkeys = len(q.kend)
	first := q.srv[0]
	q.split = false
	for _, up := range q.srv[1:] {
		if up != first {
			q.split = true
			break
		}
	}
	if !q.split {
		verb(first)
		for i := range q.nkeys {
			first.wbuf = append(first.wbuf, ' ')
			first.wbuf = append(first.wbuf, q.key(i)...)
		}
		first.wbuf = append(first.wbuf, '\r', '\n')
		l.push(first, q, 0, 0)
		return
	}
	for range q.nkeys {
		q.blk = append(q.blk, span{off: -1})
	}
	for i, up := range q.srv {
		if up == nil {
			continue // taken by an earlier server's fragment
		}
		lo := int32(len(q.order))
		verb(up)
		for j := i; j < len(q.srv); j++ {
			if q.srv[j] != up {
				continue
			}
			q.srv[j] = nil
			q.order = append(q.order, int32(j))
			up.wbuf = append(up.wbuf, ' ')
			up.wbuf = append(up.wbuf, q.key(j)...)
		}
		up.wbuf = append(up.wbuf, '\r', '\n')
		l.push(up, q, lo, int32(len(q.order)))
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

// startLine starts a request that one line answers: a storage command
// (data is its value with the "\r\n"), delete, incr, decr or touch. The
// server is sent the line's first n tokens, without noreply (and
// without a delete's legacy "0"), so that every request is answered and
// answers match requests in order; the reply to a noreply request is
// dropped when it arrives.
func (l *ploop) startLine(c *conn, r *protocol.TextRequest, n int, data []byte) {
	t := &r.Tokens
	q := l.newReq(c)
	q.cmd, q.line, q.noreply = r.Cmd, true, r.Noreply
	if len(data) > 0 {
		l.p.ctr.cmdSet.Add(1)
	}
	if l.gen.cluster {
		q.write = clusterWrite(r.Cmd)
		q.kb = append(q.kb[:0], r.Key...)
		q.sent = appendLine(q.sent[:0], t, n, data)
		l.sendOne(q)
		return
	}
	up, err := l.pick(c, r.Key)
	if err != nil {
		l.failEarly(q, r.Key, err)
		return
	}
	up.wbuf = appendLine(up.wbuf, t, n, data)
	l.push(up, q, 0, 0)
}

// appendLine appends the first n tokens of t as a line, then data.
func appendLine(b []byte, t *protocol.Tokens, n int, data []byte) []byte {
	for i := range n {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, t.T[i]...)
	}
	b = append(b, '\r', '\n')
	return append(b, data...)
}

// startMeta starts mg, ms, md or ma (data is an ms's value with its
// "\r\n"). The server is sent the request without q, so that every
// request is answered; finish drops what q hides.
func (l *ploop) startMeta(c *conn, r *protocol.TextRequest, data []byte) {
	t := &r.Tokens
	q := l.newReq(c)
	q.cmd, q.meta, q.noreply = r.Cmd, true, r.Meta.NoReply
	if r.Cmd == protocol.CmdMetaSet {
		l.p.ctr.cmdSet.Add(1)
	}
	if l.gen.cluster {
		q.write = clusterWrite(r.Cmd)
		q.kb = append(q.kb[:0], r.Key...)
		q.sent = appendMeta(q.sent[:0], t, data)
		l.sendOne(q)
		return
	}
	up, err := l.pick(c, r.Key)
	if err != nil {
		l.failEarly(q, r.Key, err)
		return
	}
	up.wbuf = appendMeta(up.wbuf, t, data)
	l.push(up, q, 0, 0)
}

// appendMeta appends the meta request t without its q flag, then data.
func appendMeta(b []byte, t *protocol.Tokens, data []byte) []byte {
	for i := 0; i < t.N-1; i++ {
		if i >= 2 && t.T[i][0] == 'q' {
			continue
		}
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, t.T[i]...)
	}
	b = append(b, '\r', '\n')
	return append(b, data...)
}

// startBin starts a binary request, pkt, which names a key: it goes to
// the server loud (a quiet request's answer that memcached would not
// send is dropped by finish), so that every request is answered.
func (l *ploop) startBin(c *conn, req *protocol.Request, pkt []byte) {
	q := l.newReq(c)
	q.bin, q.op, q.opaque = true, req.Opcode, req.Opaque
	loud, quiet := req.Opcode.Loud()
	q.quiet = quiet
	switch loud {
	case protocol.OpSet, protocol.OpAdd, protocol.OpReplace:
		l.p.ctr.cmdSet.Add(1)
	}
	if l.gen.cluster {
		q.write = clusterWriteBin(loud)
		q.kb = append(q.kb[:0], req.Key...)
		q.sent = append(q.sent[:0], pkt...)
		q.sent[1] = byte(loud)
		l.sendOne(q)
		return
	}
	up, err := l.pick(c, req.Key)
	if err != nil {
		l.failEarly(q, req.Key, err)
		return
	}
	at := len(up.wbuf)
	up.wbuf = append(up.wbuf, pkt...)
	up.wbuf[at+1] = byte(loud)
	l.push(up, q, 0, 0)
}

// localBin answers a binary request the proxy answers itself (noop,
// version, quit), in its turn.
func (l *ploop) localBin(c *conn, req *protocol.Request, value []byte) {
	q := l.newReq(c)
	q.bin, q.op, q.opaque = true, req.Opcode, req.Opaque
	q.out = protocol.AppendResponse(q.out, req.Opcode, protocol.StatusOK, req.Opaque, 0, nil, nil, value)
	l.finish(q)
}

// statsBin answers a binary Stat without a key: a response per stat,
// then an empty one, as memcached answers it.
func (l *ploop) statsBin(c *conn, req *protocol.Request) {
	q := l.takeReq(c)
	q.bin, q.op, q.opaque = true, req.Opcode, req.Opaque
	for _, kv := range l.p.statLines() {
		q.out = protocol.AppendResponse(q.out, req.Opcode, protocol.StatusOK, req.Opaque, 0, nil, []byte(kv[0]), []byte(kv[1]))
	}
	q.out = protocol.AppendResponse(q.out, req.Opcode, protocol.StatusOK, req.Opaque, 0, nil, nil, nil)
	l.finish(q)
}

// startFlushBin is startFlush for a binary Flush (FlushQ: no answer
// when every server flushed).
func (l *ploop) startFlushBin(c *conn, req *protocol.Request) {
	q := l.newReq(c)
	q.bin, q.op, q.opaque = true, req.Opcode, req.Opaque
	_, q.quiet = req.Opcode.Loud()
	q.cmd = protocol.CmdFlushAll
	l.p.ctr.cmdFlush.Add(1)
	l.eachServer(q, func(a net.Addr) {
		up := l.pickAddr(c, a)
		up.wbuf = protocol.AppendRequest(up.wbuf, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpFlush}})
		l.push(up, q, 0, 0)
	})
}

// local answers a request the proxy answers itself (version, verbosity),
// in its turn after the requests before it.
func (l *ploop) local(c *conn, cmd protocol.Cmd, reply string, noreply bool) {
	q := l.newReq(c)
	q.cmd, q.line = cmd, true
	if !noreply {
		q.out = append(q.out, reply...)
		q.out = append(q.out, '\r', '\n')
	}
	l.finish(q)
}

// stats answers "stats" (Proxy.appendStats). It is served once c's
// earlier requests are answered (myTurn), so that it counts them.
func (l *ploop) stats(c *conn, t *protocol.Tokens) {
	q := l.takeReq(c)
	q.cmd, q.line = protocol.CmdStats, true
	q.out = l.p.appendStats(q.out, t)
	l.finish(q)
}

// startFlush sends flush_all to every server of the pool; finish answers
// OK when each one did, else the first error.
func (l *ploop) startFlush(c *conn, noreply bool) {
	q := l.newReq(c)
	q.cmd, q.line, q.noreply = protocol.CmdFlushAll, true, noreply
	l.p.ctr.cmdFlush.Add(1)
	l.eachServer(q, func(a net.Addr) {
		up := l.pickAddr(c, a)
		up.wbuf = append(up.wbuf, "flush_all\r\n"...)
		l.push(up, q, 0, 0)
	})
}

// eachServer calls f for every server of the pool, or of the cluster's
// map; then q, a flush, is finished if no server was sent it (a cluster
// with no map yet: a failure).
func (l *ploop) eachServer(q *lreq, f func(net.Addr)) {
	switch {
	case !l.gen.cluster:
		l.gen.sel.Each(func(a net.Addr) error { f(a); return nil })
	case l.syncRoute():
		for _, a := range l.rtUp {
			f(a)
		}
	default:
		q.fail(failReplyAddr("cluster", memcache.ErrNoServers))
	}
	if q.frags == 0 {
		l.finish(q)
	}
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

// fail makes r's reply the failure line s (the first failure wins); a
// binary request's is status 0x84 with s's text after SERVER_ERROR.
func (r *lreq) fail(s string) {
	if r.failed {
		return
	}
	r.failed = true
	if r.bin {
		msg := []byte(strings.TrimPrefix(s, "SERVER_ERROR ")) // allocates: rare
		r.out = protocol.AppendResponse(r.out[:0], r.op, protocol.StatusInternal, r.opaque, 0, nil, nil, msg)
		return
	}
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
	switch {
	case r.bin:
		if r.cmd == protocol.CmdFlushAll && !r.failed {
			r.out = protocol.AppendResponse(r.out[:0], r.op, protocol.StatusOK, r.opaque, 0, nil, nil, nil)
		}
		if l.countBin(r) && r.quiet && !r.failed {
			r.out = r.out[:0]
		}
	case r.meta:
		if l.countMeta(r) && r.noreply {
			r.out = r.out[:0]
		}
	case r.line:
		if r.cmd == protocol.CmdFlushAll && !r.failed {
			r.out = append(r.out[:0], "OK\r\n"...)
		}
		l.count(r)
		if r.noreply {
			r.out = r.out[:0]
		}
	default:
		get, hits, misses := &l.p.ctr.cmdGet, &l.p.ctr.getHits, &l.p.ctr.getMisses
		if r.cmd == protocol.CmdGat || r.cmd == protocol.CmdGats {
			get, hits, misses = &l.p.ctr.cmdTouch, &l.p.ctr.touchHits, &l.p.ctr.touchMisses
		}
		get.Add(int64(r.nkeys))
		hits.Add(int64(r.hits))
		misses.Add(int64(r.nkeys - r.hits))
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

// count adds a one-line answer to the counters "stats" reports: a hit
// or a miss by what the server answered; a failure counts neither.
func (l *ploop) count(r *lreq) {
	ctr := &l.p.ctr
	var hits, misses *atomic.Int64
	hit := "DELETED"
	switch r.cmd {
	case protocol.CmdCas:
		if !r.failed && bytes.HasPrefix(r.out, []byte("EXISTS\r\n")) {
			ctr.casBadval.Add(1)
			return
		}
		hits, misses, hit = &ctr.casHits, &ctr.casMisses, "STORED"
	case protocol.CmdIncr, protocol.CmdDecr:
		hits, misses = &ctr.incrHits, &ctr.incrMisses
		if r.cmd == protocol.CmdDecr {
			hits, misses = &ctr.decrHits, &ctr.decrMisses
		}
		hit = ""
	case protocol.CmdDelete:
		hits, misses = &ctr.deleteHits, &ctr.deleteMisses
	case protocol.CmdTouch:
		ctr.cmdTouch.Add(1)
		hits, misses, hit = &ctr.touchHits, &ctr.touchMisses, "TOUCHED"
	default:
		return
	}
	switch {
	case r.failed:
	case bytes.HasPrefix(r.out, []byte("NOT_FOUND\r\n")):
		misses.Add(1)
	case hit == "" && len(r.out) > 0 && r.out[0] >= '0' && r.out[0] <= '9',
		hit != "" && bytes.HasPrefix(r.out, []byte(hit)) && bytes.HasPrefix(r.out[len(hit):], []byte("\r\n")):
		hits.Add(1)
	}
}

// countMeta adds a meta answer to the counters, as memcached counts it, and
// reports whether q hides it: mg's miss (EN), and the success of ms, md
// (HD) and ma (HD, or VA with v). Failures and errors are always sent.
func (l *ploop) countMeta(r *lreq) (quiet bool) {
	ctr := &l.p.ctr
	if r.cmd == protocol.CmdMetaGet {
		ctr.cmdGet.Add(1)
	}
	if r.failed || len(r.out) < 2 {
		return false
	}
	code := string(r.out[:2])
	switch r.cmd {
	case protocol.CmdMetaGet:
		switch code {
		case "EN":
			ctr.getMisses.Add(1)
			return true
		case "VA", "HD":
			ctr.getHits.Add(1)
		}
	case protocol.CmdMetaDelete:
		switch code {
		case "HD":
			ctr.deleteHits.Add(1)
			return true
		case "NF":
			ctr.deleteMisses.Add(1)
		}
	case protocol.CmdMetaSet:
		return code == "HD"
	case protocol.CmdMetaArith:
		return code == "HD" || code == "VA"
	}
	return false
}

// countBin adds a binary answer to the counters, as memcached counts it,
// and reports whether a quiet request's answer is one memcached does not
// send: a get's miss, any other command's success.
func (l *ploop) countBin(r *lreq) (hidden bool) {
	ctr := &l.p.ctr
	loud, _ := r.op.Loud()
	ok, miss := !r.failed && r.status == protocol.StatusOK, !r.failed && r.status == protocol.StatusKeyNotFound
	switch loud {
	case protocol.OpGet, protocol.OpGetK, protocol.OpGAT, protocol.OpGATK:
		n, hits, misses := &ctr.cmdGet, &ctr.getHits, &ctr.getMisses
		if loud == protocol.OpGAT || loud == protocol.OpGATK {
			n, hits, misses = &ctr.cmdTouch, &ctr.touchHits, &ctr.touchMisses
		}
		n.Add(1)
		if ok {
			hits.Add(1)
		} else if miss {
			misses.Add(1)
		}
		return miss
	case protocol.OpTouch:
		ctr.cmdTouch.Add(1)
	case protocol.OpDelete:
		if ok {
			ctr.deleteHits.Add(1)
		} else if miss {
			ctr.deleteMisses.Add(1)
		}
	}
	return ok
}
