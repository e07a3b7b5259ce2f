package server

import (
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/vbmap"
)

// Storage command kinds, as memcached's NREAD_* values, in the order of
// protocol.CmdSet … CmdCas.
type storeCmd uint8

const (
	cmdSet storeCmd = iota
	cmdAdd
	cmdReplace
	cmdAppend
	cmdPrepend
	cmdCAS
)

// storeResult is memcached's enum store_item_type.
type storeResult uint8

const (
	resStored storeResult = iota
	resNotStored
	resExists
	resNotFound
	resNoMemory
)

// realtimeMaxDelta is memcached's REALTIME_MAXDELTA: exptimes up to 30 days
// are relative, larger ones absolute.
const realtimeMaxDelta = 60 * 60 * 24 * 30

// relTime converts a protocol exptime to store time the way memcached's
// realtime(EXPTIME_TO_POSITIVE_TIME(x)) does: a negative value becomes an
// absolute time long past, i.e. already expired.
func (s *Server) relTime(exptime int32) uint32 {
	e := int64(exptime)
	if e < 0 {
		e = realtimeMaxDelta + 1
	}
	return s.store.RelTime(e)
}

// itemSize is memcached's ITEM_ntotal for an item with this key, flags and
// value: the 48-byte item header, the key and its NUL, the flags when not
// zero, the value with its CRLF, and the CAS when enabled. The size limit
// (-I) is in these units so that it falls exactly where memcached's does.
// What the stats and me report as an item's size is the store's own
// (store.Tx.Size), which is smaller: see the store's package comment.
func (s *Server) itemSize(nkey int, flags uint32, nbytes int) int {
	n := 48 + nkey + 1 + nbytes + 2
	if flags != 0 {
		n += 4
	}
	if !s.cfg.Store.DisableCAS {
		n += 8
	}
	return n
}

func (s *Server) tooLarge(nkey int, flags uint32, nbytes int) bool {
	return s.itemSize(nkey, flags, nbytes) > s.cfg.Store.ItemSizeMax
}

// dispatch runs one command line. rest holds the bytes after the line. It
// returns how many bytes of rest the command consumed, or, when the command
// needs data that has not arrived yet, more > 0 with how many bytes of rest
// it needs (and nothing was done). The line is parsed by
// protocol.ParseTextRequest; what is here is what to do with a request.
func (c *conn) dispatch(line, rest []byte) (used, more int) {
	r := &c.req
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
		c.mark = len(c.out)
	case protocol.CmdMetaDebug:
		c.metaDebug()
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
	case protocol.CmdFlushAll:
		c.flushAll()
	case protocol.CmdStats:
		c.stats()
	case protocol.CmdShutdown:
		c.shutdown()
	case protocol.CmdSlabs:
		c.slabs()
	case protocol.CmdCacheMemlimit:
		c.memlimit()
	case protocol.CmdVersion:
		c.reply("VERSION " + c.s.cfg.Version)
	case protocol.CmdQuit:
		c.close = true
		c.closeWhy = closeNormal
	case protocol.CmdLruCrawler:
		c.lruCrawler()
	case protocol.CmdWatch:
		c.watch()
	case protocol.CmdVerbosity:
		if c.reqErr() {
			break
		}
		c.s.verbosity.Store(int32(min(r.Level, 2)))
		c.reply("OK")
	case protocol.CmdRefreshCerts:
		c.noreply = r.Noreply
		switch {
		case c.s.cfg.TLSReload == nil:
			c.out = append(c.out, "Error TLS not enabled\r\n"...)
		default:
			if err := c.s.cfg.TLSReload(); err != nil {
				c.out = append(c.out, err.Error()...)
				c.out = append(c.out, '\r', '\n')
			} else {
				c.reply("OK")
			}
		}
	case protocol.CmdLru:
		if !c.reqErr() {
			c.lru()
		}
	default:
		// memcached drops connections that look like HTTP requests.
		if r.LooksHTTP() {
			c.close = true
			break
		}
		c.reply(protocol.ErrUnknown)
	}
	return 0, 0
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

// get serves get, gets, gat and gats (memcached's process_get_command).
func (c *conn) get() {
	r := &c.req
	t := &r.Tokens
	s := c.s
	if c.reqErr() {
		return
	}
	returnCAS := r.Cmd == protocol.CmdGets || r.Cmd == protocol.CmdGats
	touch := r.Cmd == protocol.CmdGat || r.Cmd == protocol.CmdGats
	var exptime uint32
	if touch {
		exptime = s.relTime(r.Exptime)
	}
	first := r.First
	if s.cl != nil && s.cfg.SyncReplication && syncReads && !touch {
		// Each hit waits for its own key's replication, after it is
		// read (below), not for the admissions' keys (leaveVB). A gat
		// writes: it waits as writes do, at its end.
		c.readsChecked = true
		defer func() {
			c.leaveVB()
			c.readsChecked = false
		}()
	}
	if s.cl != nil {
		// Cluster mode: the whole command is refused when one key is not
		// in an active vbucket (keys too long are left to the loop). This
		// pass may park on a pending vbucket before anything is output.
		for i := first; i < t.N-1; i++ {
			if key := t.T[i]; len(key) <= protocol.KeyMaxLength && !c.textAdmit(key, c.reply) {
				return
			}
		}
	}
	detail := s.detailEnabled.Load()
	for {
		for i := first; i < t.N-1; i++ {
			key := t.T[i]
			if len(key) > protocol.KeyMaxLength {
				// memcached culls every reply it has not sent yet.
				c.out = c.out[:c.mark]
				c.reply("CLIENT_ERROR bad command line format")
				return
			}
			if s.cl != nil && !c.textOwnedNow(key) {
				// Keys past the first batch of tokens were not checked
				// above, and a state may have changed since: refuse the
				// whole command the way a bad key does.
				return
			}
			oc := c.begin(key)
			hit := oc == store.Hit
			if detail {
				s.detail.recordGet(key, hit)
			}
			if hit {
				if touch {
					c.tx.Touch(exptime)
				}
				c.tx.Bump()
				v := c.tx.Value()
				c.out = append(c.out, "VALUE "...)
				c.out = append(c.out, key...)
				c.out = append(c.out, ' ')
				c.out = protocol.AppendUint(c.out, uint64(c.tx.Flags()))
				c.out = append(c.out, ' ')
				c.out = protocol.AppendUint(c.out, uint64(len(v)))
				if returnCAS {
					c.out = append(c.out, ' ')
					c.out = protocol.AppendUint(c.out, c.tx.CAS())
				}
				c.out = append(c.out, '\r', '\n')
				c.out = append(c.out, v...)
				c.out = append(c.out, '\r', '\n')
				cls := classIdx(c.tx.ClassID())
				c.tx.End()
				if c.readsChecked {
					// --sync-replication: the value may not be on its
					// replicas yet (leaveVB). A read holds no vbucket
					// admission while it waits.
					c.leaveVB()
					if !c.syncWait(vbmap.VBucket(key, s.cl.vbs.Len()), key, false) {
						// Not a miss, which would say the key is
						// absent: an error that a proxy or a client
						// retries, ending the command as memcached's
						// failed multi-get does (the replies not yet
						// sent dropped).
						c.dropOut(c.mark)
						c.replyErr("SERVER_ERROR temporary failure")
						return
					}
				}
				if len(c.out) > flushAt {
					if !touch && (c.nc != nil || c.lp != nil) {
						// Written now, not held (input.go): a get
						// mutates nothing, so it leaves its vbucket
						// before it may block on the client.
						c.leaveVB()
						if c.flush() != nil {
							c.close = true
							return
						}
					} else if !c.outRoom() {
						// memcached drops its stacked responses too.
						c.dropOut(c.mark)
						c.s.outputNoMemory.Add(1)
						c.replyErr("SERVER_ERROR out of memory writing get response")
						return
					}
				}
				if touch {
					c.ctr.cmdTouch.Add(1)
					c.ctr.class[cls].touchHits.Add(1)
				} else {
					c.ctr.lruHits[cls].Add(1)
					c.ctr.cmdGet.Add(1)
				}
			} else {
				c.tx.End()
				c.countMiss(oc, touch)
			}
		}
		if !r.NextKeys() {
			break
		}
		first = 0
		// A rest made only of spaces yields just the terminal token.
	}
	c.out = append(c.out, "END\r\n"...)
	c.mark = len(c.out)
}

func (c *conn) countMiss(oc store.Outcome, touch bool) {
	switch oc {
	case store.Expired:
		c.ctr.getExpired.Add(1)
	case store.Flushed:
		c.ctr.getFlushed.Add(1)
	}
	if touch {
		c.ctr.cmdTouch.Add(1)
		c.ctr.touchMisses.Add(1)
	} else {
		c.ctr.getMisses.Add(1)
		c.ctr.cmdGet.Add(1)
	}
}

// update parses a storage command (memcached's process_update_command)
// and, once its data has arrived, completes it (complete_nread_ascii).
func (c *conn) update(rest []byte) (used, more int) {
	r := &c.req
	s := c.s
	if c.reqErr() {
		return 0, 0
	}
	sc := storeCmd(r.Cmd - protocol.CmdSet) // the same order
	key, flags, exp, reqCAS := r.Key, r.Flags, r.Exptime, r.CAS
	n := r.Bytes
	vlen := n - 2
	if !c.textAdmit(key, c.reply) {
		c.swallowData(n, rest)
		return min(n, len(rest)), 0
	}
	if s.tooLarge(len(key), flags, int(vlen)) {
		if s.detailEnabled.Load() {
			s.detail.recordSet(key)
		}
		c.ctr.storeTooLarge.Add(1)
		c.reply("SERVER_ERROR object too large for cache")
		c.swallowData(n, rest)
		// memcached will not leave an old value behind a failed set.
		if sc == cmdSet {
			if c.begin(key) == store.Hit {
				c.tx.Delete()
			}
			c.tx.End()
		}
		return min(n, len(rest)), 0
	}
	if len(rest) < n {
		if !c.roomFor(rest, n) {
			return c.refuseNoMemory(sc == cmdSet, key, n, rest, func() {
				c.reply("SERVER_ERROR out of memory storing object")
			}), 0
		}
		return 0, n
	}
	if s.detailEnabled.Load() {
		s.detail.recordSet(key)
	}
	data := rest[:n]
	// memcached counts a set once it has allocated the item, so a set
	// refused for memory is not counted (the class is the new data's).
	setCtr := &c.ctr.class[classIdx(s.store.ClassFor(len(key), flags, int(vlen)))].cmdSet
	if data[n-2] != '\r' || data[n-1] != '\n' {
		setCtr.Add(1)
		c.reply("CLIENT_ERROR bad data chunk")
		return n, 0
	}
	res, _ := c.storeItem(sc, key, flags, s.relTime(exp), data[:n-2], reqCAS, false, false)
	if res != resNoMemory {
		setCtr.Add(1)
	}
	switch res {
	case resStored:
		c.reply("STORED")
	case resExists:
		c.reply("EXISTS")
	case resNotFound:
		c.reply("NOT_FOUND")
	case resNotStored:
		c.reply("NOT_STORED")
	case resNoMemory:
		c.reply("SERVER_ERROR out of memory storing object")
	}
	return n, 0
}

// refuseNoMemory refuses a storage command whose n bytes of data at rest
// have no buffer (input.go): reply answers, a set (del) also deletes the
// old value, as memcached does when it cannot allocate the new item, and
// the data is swallowed. It returns the bytes of rest consumed.
func (c *conn) refuseNoMemory(del bool, key []byte, n int, rest []byte, reply func()) int {
	c.s.inputNoMemory.Add(1)
	c.ctr.storeNoMemory.Add(1) // memcached counts a failed item alloc so
	reply()
	if del {
		if c.begin(key) == store.Hit {
			c.tx.Delete()
		}
		c.tx.End()
	}
	c.swallowData(n, rest)
	return min(n, len(rest))
}

// swallowData discards n bytes of rejected data: what is buffered now and
// the remainder as it arrives.
func (c *conn) swallowData(n int, rest []byte) {
	if n > 0 && n > len(rest) {
		c.swallow = n - len(rest)
	}
}

// storeItem is memcached's do_store_item: it applies a storage command to
// the store under one shard lock and returns the outcome and the new CAS.
func (c *conn) storeItem(sc storeCmd, key []byte, flags, exptime uint32, data []byte, reqCAS uint64, setStale, keyBinary bool) (res storeResult, cas uint64) {
	s := c.s
	tx := &c.tx
	c.begin(key)
	defer tx.End()
	// What a watcher's item_store line says of the item (watch.go): the
	// command's unless an append or prepend builds it from the old one.
	logFlags, logExp, logSize := flags, exptime, len(data)
	if s.watch.mutations.Load() > 0 {
		defer func() { c.logStore(sc, res, key, logFlags, logExp, logSize) }()
	}
	if !tx.Found() {
		switch sc {
		case cmdAdd, cmdSet:
			return c.link(sc, flags, exptime, data, nil, keyBinary)
		case cmdCAS:
			c.ctr.casMisses.Add(1)
			return resNotFound, 0
		}
		return resNotStored, 0
	}
	oldCAS := tx.CAS()
	const (
		casNone = iota
		casMatch
		casStale
		casBad
	)
	casRes := casNone
	switch {
	case reqCAS == 0:
	case reqCAS == oldCAS:
		casRes = casMatch
	case setStale && reqCAS < oldCAS:
		casRes = casStale
	default:
		casRes = casBad
	}
	cls := classIdx(tx.ClassID())
	switch sc {
	case cmdAdd:
		tx.Bump()
		return resNotStored, 0
	case cmdCAS:
		switch casRes {
		case casMatch:
			c.ctr.class[cls].casHits.Add(1)
			return c.link(sc, flags, exptime, data, nil, keyBinary)
		case casStale:
			c.ctr.class[cls].casHits.Add(1)
			tokenSent := tx.TokenSent()
			res, cas := c.link(sc, flags, tx.Exptime(), data, nil, keyBinary)
			if res == resStored {
				tx.SetStale(true)
				tx.SetTokenSent(tokenSent)
			}
			return res, cas
		}
		c.ctr.class[cls].casBadval.Add(1)
		return resExists, 0
	case cmdAppend, cmdPrepend:
		if casRes != casNone && casRes != casMatch {
			return resExists, 0
		}
		old := tx.Value()
		oflags := tx.Flags()
		exp := tx.Exptime()
		logFlags, logExp, logSize = oflags, exp, len(old)+len(data)
		if s.tooLarge(len(key), oflags, len(old)+len(data)) {
			return resNotStored, 0
		}
		a, b := old, data
		if sc == cmdPrepend {
			a, b = data, old
		}
		res, cas := c.link(sc, oflags, exp, a, b, keyBinary)
		if res == resNoMemory {
			return resNotStored, 0
		}
		return res, cas
	}
	// set, replace
	return c.link(sc, flags, exptime, data, nil, keyBinary)
}

// link stores a+b as the transaction's new item.
func (c *conn) link(sc storeCmd, flags, exptime uint32, a, b []byte, keyBinary bool) (storeResult, uint64) {
	err := c.tx.Store(flags, exptime, 0, a, b)
	if err != nil {
		c.ctr.storeNoMemory.Add(1)
		if sc == cmdSet {
			// As for too large: no stale value survives a failed set.
			if c.tx.Found() {
				c.tx.Delete()
			}
		}
		return resNoMemory, 0
	}
	if keyBinary {
		c.tx.SetKeyBinary(true)
	}
	return resStored, c.tx.CAS()
}

// arithmetic serves incr and decr (memcached's process_arithmetic_command).
func (c *conn) arithmetic() {
	r := &c.req
	if c.reqErr() {
		return
	}
	key, delta, incr := r.Key, r.Delta, r.Cmd == protocol.CmdIncr
	if !c.textAdmit(key, c.reply) {
		return
	}
	c.begin(key)
	res, digits := c.addDelta(incr, delta, 0)
	c.tx.End()
	switch res {
	case deltaOK:
		if !c.noreply {
			c.out = append(c.out, digits...)
			c.out = append(c.out, '\r', '\n')
		}
	case deltaNonNumeric:
		c.reply("CLIENT_ERROR cannot increment or decrement non-numeric value")
	case deltaNoMemory:
		c.reply("SERVER_ERROR out of memory")
	case deltaNotFound:
		if incr {
			c.ctr.incrMisses.Add(1)
		} else {
			c.ctr.decrMisses.Add(1)
		}
		c.reply("NOT_FOUND")
	}
}

type deltaResult uint8

const (
	deltaOK deltaResult = iota
	deltaNonNumeric
	deltaNoMemory
	deltaNotFound
	deltaCASMismatch
)

// addDelta is memcached's do_add_delta on the item held by c.tx. The new
// value's digits are returned in c.num (valid until the next command). A
// result that fits in the old value's length is written in place and padded
// with spaces, keeping the length, exactly as memcached does.
func (c *conn) addDelta(incr bool, delta, reqCAS uint64) (deltaResult, []byte) {
	tx := &c.tx
	if !tx.Found() {
		return deltaNotFound, nil
	}
	v := tx.Value()
	if len(v) == 0 {
		return deltaNonNumeric, nil
	}
	if reqCAS != 0 && tx.CAS() != reqCAS {
		return deltaCASMismatch, nil
	}
	val, ok := protocol.ParseUint64(v)
	if !ok {
		return deltaNonNumeric, nil
	}
	if incr {
		val += delta
	} else if delta > val {
		val = 0
	} else {
		val -= delta
	}
	cls := classIdx(tx.ClassID())
	if incr {
		c.ctr.class[cls].incrHits.Add(1)
	} else {
		c.ctr.class[cls].decrHits.Add(1)
	}
	digits := protocol.AppendUint(c.num[:0], val)
	if len(digits) <= len(v) && tx.Overwrite(digits) {
		tx.Bump()
		return deltaOK, digits
	}
	if err := tx.Store(tx.Flags(), tx.Exptime(), 0, digits, nil); err != nil {
		return deltaNoMemory, nil
	}
	return deltaOK, digits
}

// touch is memcached's process_touch_command.
func (c *conn) touch() {
	if c.reqErr() {
		return
	}
	key := c.req.Key
	exp := c.s.relTime(c.req.Exptime)
	if !c.textAdmit(key, c.reply) {
		return
	}
	oc := c.begin(key)
	c.ctr.cmdTouch.Add(1)
	if oc == store.Hit {
		c.tx.Touch(exp)
		c.tx.Bump()
		c.ctr.class[classIdx(c.tx.ClassID())].touchHits.Add(1)
		c.tx.End()
		c.reply("TOUCHED")
		return
	}
	c.tx.End()
	switch oc {
	case store.Expired:
		c.ctr.getExpired.Add(1)
	case store.Flushed:
		c.ctr.getFlushed.Add(1)
	}
	c.ctr.touchMisses.Add(1)
	c.reply("NOT_FOUND")
}

// delete is memcached's process_delete_command (the legacy "delete <key>
// 0" form is protocol.ParseTextRequest's).
func (c *conn) delete() {
	if c.reqErr() {
		return
	}
	key := c.req.Key
	if !c.textAdmit(key, c.reply) {
		return
	}
	if c.s.detailEnabled.Load() {
		c.s.detail.recordDelete(key)
	}
	if c.begin(key) == store.Hit {
		c.ctr.class[classIdx(c.tx.ClassID())].deleteHits.Add(1)
		c.tx.Delete()
		c.tx.End()
		c.reply("DELETED")
		return
	}
	c.tx.End()
	c.ctr.deleteMisses.Add(1)
	c.reply("NOT_FOUND")
}

// flushAll is memcached's process_flush_all_command.
func (c *conn) flushAll() {
	r := &c.req
	if r.Err == protocol.ErrUnknown {
		c.reply(r.Err) // a wrong number of tokens: not a flush_all at all
		return
	}
	c.noreply = r.Noreply
	c.ctr.cmdFlush.Add(1)
	if c.s.cfg.DisableFlush {
		c.reply("CLIENT_ERROR flush_all not allowed")
		return
	}
	if c.reqErr() {
		return
	}
	exptime := r.Exptime
	if exptime < 0 {
		exptime = 0
	}
	c.s.flush(int64(exptime))
	c.reply("OK")
}

func (c *conn) shutdown() {
	t := &c.req.Tokens
	if !c.s.cfg.EnableShutdown {
		c.reply("ERROR: shutdown not enabled")
		return
	}
	if t.N == 2 || (t.N == 3 && string(t.T[1]) == "graceful") {
		c.close = true
		c.closeWhy = closeShutdown
		c.s.requestShutdown()
		return
	}
	c.reply("CLIENT_ERROR invalid shutdown mode")
}

func (c *conn) memlimit() {
	t := &c.req.Tokens
	if c.reqErr() {
		return
	}
	c.setNoreply()
	mb, ok := protocol.ParseUint32(t.T[1])
	switch {
	case !ok:
		c.reply("ERROR")
	case mb < 8:
		c.reply("MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m")
	case mb > 1000000000:
		c.reply("MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes")
	default:
		if err := c.s.store.SetMemLimit(int64(mb) << 20); err != nil {
			c.reply("MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust")
			return
		}
		c.s.limitMaxbytes.Store(int64(mb) << 20)
		c.reply("OK")
	}
}
