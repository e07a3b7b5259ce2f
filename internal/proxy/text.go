package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/memcache"
)

func (c *conn) reply(s string) {
	if c.noreply {
		return
	}
	c.out = append(c.out, s...)
	c.out = append(c.out, '\r', '\n')
}

// reqErr answers a request that did not parse (memcached's reply, which a
// classic command's noreply silences) and reports whether it did.
func (c *conn) reqErr() bool {
	r := &c.req
	c.noreply = r.Noreply
	if r.Err == "" {
		return false
	}
	c.reply(r.Err)
	return true
}

// storeVerbs names the storage commands, in protocol.CmdSet … CmdCas's
// order.
var storeVerbs = [...]string{"set", "add", "replace", "append", "prepend", "cas"}

// dispatch runs one text command line; rest holds the bytes after the
// line. It returns the bytes of rest used, or more > 0 when the command
// needs that many bytes of rest first. The line is parsed by
// protocol.ParseTextRequest, as the node parses it; what is here is what
// the proxy does with a request.
func (c *conn) dispatch(line, rest []byte) (used, more int) {
	r := &c.req
	c.noreply = false
	protocol.ParseTextRequest(line, r)
	switch r.Cmd {
	case protocol.CmdMetaGet:
		c.metaGet()
	case protocol.CmdMetaSet:
		return c.metaSet(rest)
	case protocol.CmdMetaDelete:
		c.metaDelete()
	case protocol.CmdMetaArith:
		c.metaArithmetic()
	case protocol.CmdMetaNoop:
		c.reply("MN")
	case protocol.CmdMetaDebug:
		c.reply("CLIENT_ERROR me is not supported by the proxy")
	case protocol.CmdGet, protocol.CmdGets, protocol.CmdGat, protocol.CmdGats:
		c.get()
	case protocol.CmdSet, protocol.CmdAdd, protocol.CmdReplace, protocol.CmdAppend, protocol.CmdPrepend, protocol.CmdCas:
		return c.update(rest)
	case protocol.CmdIncr, protocol.CmdDecr:
		c.arithmetic()
	case protocol.CmdDelete:
		c.delete()
	case protocol.CmdTouch:
		c.touch()
	case protocol.CmdStats:
		c.stats()
	case protocol.CmdFlushAll:
		c.flushAll()
	case protocol.CmdVersion:
		c.reply("VERSION " + c.p.Version)
	case protocol.CmdQuit:
		c.close = true
	case protocol.CmdVerbosity:
		if !c.reqErr() {
			c.p.verbosity.Store(int32(min(r.Level, 2)))
			c.reply("OK")
		}
	case protocol.CmdShutdown:
		c.reply("ERROR: shutdown not enabled")
	default:
		// A command the proxy does not serve. memcached drops connections
		// that look like HTTP requests.
		if r.LooksHTTP() {
			c.close = true
			break
		}
		c.reply(protocol.ErrUnknown)
	}
	return 0, 0
}

// failReply is the reply to an upstream failure: memcached's
// SERVER_ERROR line, naming the upstream and the reason.
func failReply(u *upstream, key string, err error) string {
	return failReplyAddr(u.addrOf(key), err)
}

// failReplyAddr is failReply for the server at addr.
func failReplyAddr(addr string, err error) string {
	reason := err.Error()
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		reason = "timeout"
	case errors.Is(err, memcache.ErrNotMyVBucket):
		reason = "vbucket map did not settle"
	case errors.Is(err, memcache.ErrTemporaryFailure):
		reason = "temporary failure"
	}
	reason = strings.TrimPrefix(reason, "memcache: ")
	reason = strings.Map(func(r rune) rune {
		if r < ' ' {
			return ' '
		}
		return r
	}, reason)
	if len(reason) > 200 {
		reason = reason[:200]
	}
	return "SERVER_ERROR proxy upstream " + addr + ": " + reason
}

// errReply is the text reply for an error answer or failure from the
// upstream (nil, a miss, NOT_STORED and EXISTS are handled by callers).
func errReply(u *upstream, key string, err error) string {
	if !answer(err) {
		return failReply(u, key, err)
	}
	m := err.Error()
	switch {
	case errors.Is(err, memcache.ErrCacheMiss):
		return "NOT_FOUND"
	case errors.Is(err, memcache.ErrNotStored):
		return "NOT_STORED"
	case errors.Is(err, memcache.ErrCASConflict):
		return "EXISTS"
	case errors.Is(err, memcache.ErrMalformedKey):
		return "CLIENT_ERROR bad command line format"
	case strings.HasPrefix(m, "memcache: client error: "):
		return "CLIENT_ERROR " + m[len("memcache: client error: "):]
	case strings.HasPrefix(m, "memcache: server error: "):
		return "SERVER_ERROR " + m[len("memcache: server error: "):]
	case strings.HasPrefix(m, "memcache: server replied ERROR"):
		return "ERROR"
	case strings.HasPrefix(m, "memcache: status 0x6"):
		return "CLIENT_ERROR cannot increment or decrement non-numeric value"
	case strings.HasPrefix(m, "memcache: status 0x3"):
		return "SERVER_ERROR object too large for cache"
	case strings.HasPrefix(m, "memcache: status 0x4"):
		return "CLIENT_ERROR bad command line format"
	case strings.HasPrefix(m, "memcache: status 0x82"):
		return "SERVER_ERROR out of memory storing object"
	}
	return "SERVER_ERROR " + strings.TrimPrefix(m, "memcache: ")
}

// get serves get, gets, gat and gats: the keys are split by server and
// fetched in parallel (GetMultiFunc), and the values written in request
// order. The keys become substrings of one string, and the values are
// gathered in the conn's scratch buffer, so a multi-get costs one
// allocation here.
func (c *conn) get() {
	r := &c.req
	t := &r.Tokens
	if c.reqErr() {
		return
	}
	withCAS := r.Cmd == protocol.CmdGets || r.Cmd == protocol.CmdGats
	touch := r.Cmd == protocol.CmdGat || r.Cmd == protocol.CmdGats
	exptime, first := r.Exptime, r.First
	c.kb, c.keyEnd = c.kb[:0], c.keyEnd[:0]
	for {
		for i := first; i < t.N-1; i++ {
			if len(t.T[i]) > protocol.KeyMaxLength {
				c.reply("CLIENT_ERROR bad command line format")
				return
			}
			c.kb = append(c.kb, t.T[i]...)
			c.keyEnd = append(c.keyEnd, len(c.kb))
		}
		if !r.NextKeys() {
			break
		}
		first = 0
	}
	if len(c.keyEnd) == 0 { // "gat 0": memcached answers END
		c.out = append(c.out, "END\r\n"...)
		return
	}
	all := string(c.kb)
	keys := c.keys[:0]
	c.hits = c.hits[:0]
	prev := 0
	for _, e := range c.keyEnd {
		keys = append(keys, all[prev:e])
		c.hits = append(c.hits, hit{off: -1})
		prev = e
	}
	c.keys = keys
	c.vals = c.vals[:0]
	defer c.trimGetScratch()
	u := c.p.acquire()
	defer u.release()
	var err error
	switch {
	case touch:
		for i, k := range keys {
			var it *memcache.Item
			e := u.call(&c.rc, k, func(ctx context.Context) (err error) {
				it, err = u.mc.GetAndTouchContext(ctx, k, exptime)
				return err
			})
			c.p.ctr.cmdTouch.Add(1)
			if it != nil {
				c.keep(i, it)
				c.p.ctr.touchHits.Add(1)
			} else if errors.Is(e, memcache.ErrCacheMiss) {
				c.p.ctr.touchMisses.Add(1)
			} else if e != nil && err == nil {
				err = e
			}
		}
	case len(keys) == 1:
		var it *memcache.Item
		err = u.call(&c.rc, keys[0], func(ctx context.Context) (err error) {
			it, err = u.mc.GetContext(ctx, keys[0])
			return err
		})
		if it != nil {
			c.keep(0, it)
		}
		if errors.Is(err, memcache.ErrCacheMiss) || errors.Is(err, memcache.ErrMalformedKey) {
			err = nil
		}
	default:
		err = u.callMulti(&c.rc, keys, &c.srvs, func(ctx context.Context) error {
			return u.mc.GetMultiFunc(ctx, keys, c.keep)
		})
		if errors.Is(err, memcache.ErrMalformedKey) {
			err = nil
		}
	}
	if err != nil {
		c.reply(errReply(u, keys[0], err))
		return
	}
	for i, k := range keys {
		h := c.hits[i]
		if !touch {
			c.p.ctr.cmdGet.Add(1)
			if h.off < 0 {
				c.p.ctr.getMisses.Add(1)
			} else {
				c.p.ctr.getHits.Add(1)
			}
		}
		if h.off < 0 {
			continue
		}
		c.out = appendValue(c.out, k, h.flags, c.vals[h.off:h.off+h.n], h.cas, withCAS)
	}
	c.out = append(c.out, "END\r\n"...)
}

// appendValue appends a text get's VALUE block for one hit.
func appendValue(out []byte, key string, flags uint32, val []byte, cas uint64, withCAS bool) []byte {
	out = append(out, "VALUE "...)
	out = append(out, key...)
	out = append(out, ' ')
	out = protocol.AppendUint(out, uint64(flags))
	out = append(out, ' ')
	out = protocol.AppendUint(out, uint64(len(val)))
	if withCAS {
		out = append(out, ' ')
		out = protocol.AppendUint(out, cas)
	}
	out = append(out, '\r', '\n')
	out = append(out, val...)
	return append(out, '\r', '\n')
}

// keep copies the hit for key i of a get into the conn's scratch space.
func (c *conn) keep(i int, it *memcache.Item) {
	c.hits[i] = hit{off: len(c.vals), n: len(it.Value), flags: it.Flags, cas: it.CasID}
	c.vals = append(c.vals, it.Value...)
}

// trimGetScratch lets go of the keys (they are in the client's ops no
// longer) and of scratch buffers a huge get grew.
func (c *conn) trimGetScratch() {
	clear(c.keys)
	c.keys = c.keys[:0]
	if cap(c.kb) > 64<<10 || cap(c.keys) > 4096 {
		c.kb, c.keyEnd, c.keys, c.hits, c.srvs = nil, nil, nil, nil, nil
	}
	if cap(c.vals) > 1<<20 {
		c.vals = nil
	}
}

// update serves the storage commands (memcached's process_update_command).
func (c *conn) update(rest []byte) (used, more int) {
	r := &c.req
	if c.reqErr() {
		return 0, 0
	}
	verb := storeVerbs[r.Cmd-protocol.CmdSet]
	key, flags, exp, casID, n := r.Key, r.Flags, r.Exptime, r.CAS, r.Bytes
	if n > maxBody {
		// Like memcached's too large item: refuse and swallow the data.
		c.noreply = false
		c.reply("SERVER_ERROR object too large for cache")
		if n > len(rest) {
			c.swallow = n - len(rest)
		}
		return min(n, len(rest)), 0
	}
	if len(rest) < n {
		return 0, n
	}
	data := rest[:n]
	c.p.ctr.cmdSet.Add(1)
	if data[n-2] != '\r' || data[n-1] != '\n' {
		c.noreply = false
		c.reply("CLIENT_ERROR bad data chunk")
		return n, 0
	}
	c.item = memcache.Item{Key: string(key), Value: data[:n-2], Flags: flags, Expiration: exp, CasID: casID}
	it := &c.item // the client encodes it during the call: reused
	u := c.p.acquire()
	defer u.release()
	err := u.callOnce(&c.rc, it.Key, func(ctx context.Context) error {
		switch verb {
		case "set":
			return u.mc.SetContext(ctx, it)
		case "add":
			return u.mc.AddContext(ctx, it)
		case "replace":
			return u.mc.ReplaceContext(ctx, it)
		case "append":
			return u.mc.AppendContext(ctx, it)
		case "prepend":
			return u.mc.PrependContext(ctx, it)
		}
		return u.mc.CompareAndSwapContext(ctx, it)
	})
	switch {
	case err == nil:
		if verb == "cas" {
			c.p.ctr.casHits.Add(1)
		}
		c.reply("STORED")
	case verb == "cas" && errors.Is(err, memcache.ErrCacheMiss):
		c.p.ctr.casMisses.Add(1)
		c.reply("NOT_FOUND")
	case verb == "cas" && errors.Is(err, memcache.ErrCASConflict):
		c.p.ctr.casBadval.Add(1)
		c.reply("EXISTS")
	default:
		c.reply(errReply(u, it.Key, err))
	}
	return n, 0
}

// arithmetic serves incr and decr.
func (c *conn) arithmetic() {
	if c.reqErr() {
		return
	}
	incr, delta := c.req.Cmd == protocol.CmdIncr, c.req.Delta
	k := string(c.req.Key)
	u := c.p.acquire()
	defer u.release()
	var v uint64
	err := u.callOnce(&c.rc, k, func(ctx context.Context) (err error) {
		v, _, err = u.mc.IncrDecrContext(ctx, k, incr, delta)
		return err
	})
	hits, misses := &c.p.ctr.incrHits, &c.p.ctr.incrMisses
	if !incr {
		hits, misses = &c.p.ctr.decrHits, &c.p.ctr.decrMisses
	}
	switch {
	case err == nil:
		hits.Add(1)
		c.reply(strconv.FormatUint(v, 10))
	case errors.Is(err, memcache.ErrCacheMiss):
		misses.Add(1)
		c.reply("NOT_FOUND")
	default:
		c.reply(errReply(u, k, err))
	}
}

// delete is memcached's process_delete_command.
func (c *conn) delete() {
	if c.reqErr() {
		return
	}
	k := string(c.req.Key)
	u := c.p.acquire()
	defer u.release()
	err := u.callOnce(&c.rc, k, func(ctx context.Context) error { return u.mc.DeleteContext(ctx, k) })
	switch {
	case err == nil:
		c.p.ctr.deleteHits.Add(1)
		c.reply("DELETED")
	case errors.Is(err, memcache.ErrCacheMiss):
		c.p.ctr.deleteMisses.Add(1)
		c.reply("NOT_FOUND")
	default:
		c.reply(errReply(u, k, err))
	}
}

func (c *conn) touch() {
	if c.reqErr() {
		return
	}
	e, k := c.req.Exptime, string(c.req.Key)
	u := c.p.acquire()
	defer u.release()
	err := u.call(&c.rc, k, func(ctx context.Context) error { return u.mc.TouchContext(ctx, k, e) })
	c.p.ctr.cmdTouch.Add(1)
	switch {
	case err == nil:
		c.p.ctr.touchHits.Add(1)
		c.reply("TOUCHED")
	case errors.Is(err, memcache.ErrCacheMiss):
		c.p.ctr.touchMisses.Add(1)
		c.reply("NOT_FOUND")
	default:
		c.reply(errReply(u, k, err))
	}
}

// flushAll sends flush_all to every server. A delay is not supported by
// the client and is refused.
func (c *conn) flushAll() {
	if c.reqErr() {
		return
	}
	if c.req.Exptime > 0 {
		c.reply("CLIENT_ERROR flush_all with a delay is not supported by the proxy")
		return
	}
	c.p.ctr.cmdFlush.Add(1)
	u := c.p.acquire()
	defer u.release()
	err := u.call(&c.rc, "", func(ctx context.Context) error { return u.mc.FlushAllContext(ctx) })
	if err != nil {
		c.reply(errReply(u, "", err))
		return
	}
	c.reply("OK")
}
