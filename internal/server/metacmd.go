package server

import (
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/store"
)

// The meta commands follow memcached 1.6.18's proto_text.c closely: flags
// are pre-parsed once (protocol.ParseMetaFlags), then the reply's return
// flags are written in the order the request gave them.

// metaKey appends " k<key>", base64-encoded with a trailing " b" when the
// key is binary.
func (c *conn) metaKey(dst, key []byte, binary bool) []byte {
	dst = append(dst, ' ', 'k')
	if !binary {
		return append(dst, key...)
	}
	dst = protocol.Base64Encode(dst, key)
	return append(dst, ' ', 'b')
}

// appendTTL appends memcached's t value: -1 for never, else seconds left.
func appendTTL(dst []byte, ttl int64) []byte {
	if ttl < 0 {
		return append(dst, '-', '1')
	}
	return protocol.AppendUint(dst, uint64(ttl))
}

// metaStart is the common start of mg, md and ma: it answers a request
// that did not parse (protocol.ParseTextRequest words memcached's errors
// per command; they are sent whatever q says, q not being read yet) and
// admits the key. It returns the key (decoded when b is given), or ok
// false after replying.
func (c *conn) metaStart() (key []byte, ok bool) {
	r := &c.req
	if r.Err != "" {
		c.replyErr(r.Err)
		return nil, false
	}
	if !c.textAdmit(r.Key, c.replyErr) {
		return nil, false
	}
	return r.Key, true
}

// appendOpaqueKey appends the O and k return flags of tokens from..N-2 in
// request order (what every meta reply without an item echoes). It reports
// false, after replacing the reply from start with memcached's error, when
// an opaque is too long.
func (c *conn) appendOpaqueKey(from, start int, key []byte, binary bool) bool {
	t := &c.req.Tokens
	for i := from; i < t.N-1; i++ {
		switch tok := t.T[i]; tok[0] {
		case 'O':
			if !c.appendOpaque(start, tok) {
				return false
			}
		case 'k':
			c.out = c.metaKey(c.out, key, binary)
		}
	}
	return true
}

// appendOpaque appends " O<opaque>", or replaces the reply from start with
// memcached's error when the opaque is over 32 bytes.
func (c *conn) appendOpaque(start int, tok []byte) bool {
	if len(tok) > protocol.MetaMaxOpaqueLen {
		c.out = c.out[:start]
		c.replyErr("CLIENT_ERROR opaque token too long")
		return false
	}
	c.out = append(c.out, ' ')
	c.out = append(c.out, tok...)
	return true
}

// metaGet is mg (memcached's process_mget_command).
func (c *conn) metaGet() {
	t := &c.req.Tokens
	s := c.s
	f := &c.req.Meta
	key, ok := c.metaStart()
	if !ok {
		return
	}
	c.noreply = f.NoReply
	tx := &c.tx
	oc := c.begin(key)
	defer tx.End()
	if !f.Locked && !f.NoUpdate && oc == store.Hit {
		tx.Bump()
	}
	created := false
	if oc != store.Hit && f.Vivify {
		// memcached does not mark a vivified item's key as binary, so a
		// later k flag returns it raw.
		if tx.Store(0, 0, 0, nil, nil) == nil {
			created = true
		}
	}
	start := len(c.out)
	if !tx.Found() {
		switch oc {
		case store.Expired:
			c.ctr.getExpired.Add(1)
		case store.Flushed:
			c.ctr.getFlushed.Add(1)
		}
		c.ctr.getMisses.Add(1)
		c.ctr.cmdGet.Add(1)
		if c.noreply {
			return
		}
		c.out = append(c.out, 'E', 'N')
		if c.appendOpaqueKey(2, start, key, f.KeyBinary) {
			c.out = append(c.out, '\r', '\n')
		}
		return
	}
	v := tx.Value()
	if f.Value {
		c.out = append(c.out, 'V', 'A', ' ')
		c.out = protocol.AppendUint(c.out, uint64(len(v)))
	} else {
		c.out = append(c.out, 'H', 'D')
	}
	won := false
	ttlSet := false
	for i := 2; i < t.N-1; i++ {
		tok := t.T[i]
		switch tok[0] {
		case 'T':
			ttlSet = true
			tx.Touch(s.relTime(f.Exptime))
		case 'N':
			if created {
				tx.Touch(s.relTime(f.VivifyTTL))
				won = true
			}
		case 'R':
			if !tx.TokenSent() && !created {
				if ttl := tx.TTL(); ttl >= 0 {
					now, _ := s.store.Now()
					if now+uint32(ttl) < s.relTime(f.Recache) {
						won = true
					}
				}
			}
		case 's':
			c.out = append(c.out, ' ', 's')
			c.out = protocol.AppendUint(c.out, uint64(len(v)))
		case 't':
			c.out = append(c.out, ' ', 't')
			c.out = appendTTL(c.out, tx.TTL())
		case 'c':
			c.out = append(c.out, ' ', 'c')
			c.out = protocol.AppendUint(c.out, tx.CAS())
		case 'f':
			c.out = append(c.out, ' ', 'f')
			c.out = protocol.AppendUint(c.out, uint64(tx.Flags()))
		case 'l':
			c.out = append(c.out, ' ', 'l')
			c.out = protocol.AppendUint(c.out, uint64(max(tx.LastAccess(), 0)))
		case 'h':
			c.out = append(c.out, ' ', 'h')
			if tx.Fetched() {
				c.out = append(c.out, '1')
			} else {
				c.out = append(c.out, '0')
			}
		case 'O':
			if !c.appendOpaque(start, tok) {
				return
			}
		case 'k':
			c.out = c.metaKey(c.out, key, tx.KeyBinary())
		}
	}
	if tx.TokenSent() {
		c.out = append(c.out, ' ', 'Z')
	}
	if tx.Stale() {
		c.out = append(c.out, ' ', 'X')
		if !tx.TokenSent() {
			won = true
		}
	}
	if won {
		c.out = append(c.out, ' ', 'W')
		tx.SetTokenSent(true)
	}
	c.out = append(c.out, '\r', '\n')
	if f.Value {
		c.out = append(c.out, v...)
		c.out = append(c.out, '\r', '\n')
	}
	if f.Locked && !f.NoUpdate {
		tx.Bump()
	}
	cls := classIdx(tx.ClassID())
	if ttlSet {
		c.ctr.cmdTouch.Add(1)
		c.ctr.class[cls].touchHits.Add(1)
	} else {
		c.ctr.lruHits[cls].Add(1)
		c.ctr.cmdGet.Add(1)
	}
}

// metaSet is ms (memcached's process_mset_command and _finalize_mset).
func (c *conn) metaSet(rest []byte) (used, more int) {
	r := &c.req
	s := c.s
	t := &r.Tokens
	n := r.Bytes
	if r.Err != "" {
		used, c.swallow = r.Refuse(c.replyErr, len(rest))
		return used, 0
	}
	// From here on an error also discards the data block.
	fail := func(msg string) (int, int) {
		c.replyErr(msg)
		used, c.swallow = r.Skip(len(rest))
		return used, 0
	}
	f, key, vlen := &r.Meta, r.Key, n-2
	if !c.textAdmit(key, func(msg string) { fail(msg) }) {
		return min(n, len(rest)), 0
	}
	sc := cmdSet // modes 0 and S; the parser refused any other
	switch f.Mode {
	case 'E':
		sc = cmdAdd
	case 'A':
		sc = cmdAppend
	case 'P':
		sc = cmdPrepend
	case 'R':
		sc = cmdReplace
	}
	if f.HasCAS && (sc == cmdSet || sc == cmdReplace) {
		sc = cmdCAS
	}
	if s.tooLarge(len(key), f.ClientFlags, int(vlen)) {
		c.ctr.storeTooLarge.Add(1)
		// memcached unlinks the old item in every mode here.
		if c.begin(key) == store.Hit {
			c.tx.Delete()
		}
		c.tx.End()
		return fail("SERVER_ERROR object too large for cache")
	}
	if len(rest) < n {
		if !c.roomFor(rest, n) {
			// memcached unlinks the old item in every mode here too.
			c.refuseNoMemory(true, key, 0, nil, func() {})
			return fail("SERVER_ERROR out of memory storing object")
		}
		return 0, n
	}
	c.noreply = f.NoReply
	data := rest[:n]
	setCtr := &c.ctr.class[classIdx(s.store.ClassFor(len(key), f.ClientFlags, int(vlen)))].cmdSet
	if data[n-2] != '\r' || data[n-1] != '\n' {
		setCtr.Add(1)
		c.replyErr("CLIENT_ERROR bad data chunk")
		return n, 0
	}
	var exptime uint32
	if f.NewTTL {
		exptime = s.relTime(f.Exptime)
	}
	res, cas := c.storeItem(sc, key, f.ClientFlags, exptime, data[:n-2], f.CAS, f.SetStale && sc == cmdCAS, f.KeyBinary)
	if res != resNoMemory {
		setCtr.Add(1)
	}
	var code string
	switch res {
	case resStored:
		if c.noreply {
			return n, 0
		}
		code = "HD"
	case resExists:
		code = "EX"
	case resNotFound:
		code = "NF"
	case resNotStored:
		code = "NS"
	case resNoMemory:
		c.replyErr("SERVER_ERROR out of memory storing object")
		return n, 0
	}
	c.out = append(c.out, code...)
	for i := 3; i < t.N-1; i++ {
		switch tok := t.T[i]; tok[0] {
		case 'O':
			c.out = append(c.out, ' ')
			c.out = append(c.out, tok...)
		case 'k':
			c.out = c.metaKey(c.out, key, f.KeyBinary)
		case 'c':
			c.out = append(c.out, ' ', 'c')
			c.out = protocol.AppendUint(c.out, cas)
		}
	}
	c.out = append(c.out, '\r', '\n')
	return n, 0
}

// metaDelete is md (memcached's process_mdelete_command).
func (c *conn) metaDelete() {
	s := c.s
	f := &c.req.Meta
	key, ok := c.metaStart()
	if !ok {
		return
	}
	c.noreply = f.NoReply
	start := len(c.out)
	c.out = append(c.out, "XX"...) // status, filled in below
	if !c.appendOpaqueKey(2, start, key, f.KeyBinary) {
		return
	}
	c.out = append(c.out, '\r', '\n')
	tx := &c.tx
	c.begin(key)
	defer tx.End()
	if !tx.Found() {
		c.ctr.deleteMisses.Add(1)
		copy(c.out[start:], "NF")
		return
	}
	if f.HasCAS && tx.CAS() != f.CAS {
		c.ctr.deleteMisses.Add(1)
		copy(c.out[start:], "EX")
		return
	}
	if f.SetStale {
		if f.NewTTL {
			tx.Touch(s.relTime(f.Exptime))
		}
		tx.SetStale(true)
		tx.SetTokenSent(false)
		tx.SetCAS(tx.NextCAS())
	} else {
		c.ctr.class[classIdx(tx.ClassID())].deleteHits.Add(1)
		tx.Delete()
	}
	if c.noreply {
		c.out = c.out[:start]
		return
	}
	copy(c.out[start:], "HD")
}

// metaArithmetic is ma (memcached's process_marithmetic_command).
func (c *conn) metaArithmetic() {
	t := &c.req.Tokens
	s := c.s
	f := &c.req.Meta
	key, ok := c.metaStart()
	if !ok {
		return
	}
	c.noreply = f.NoReply
	incr := !c.req.Decr()
	tx := &c.tx
	c.begin(key)
	defer tx.End()
	start := len(c.out)
	res, digits := c.addDelta(incr, f.Delta, f.CAS)
	created := false
	skip := false
	switch res {
	case deltaOK:
		skip = c.noreply
	case deltaNonNumeric:
		c.replyErr("CLIENT_ERROR cannot increment or decrement non-numeric value")
		return
	case deltaNoMemory:
		c.replyErr("SERVER_ERROR out of memory")
		return
	case deltaNotFound:
		if f.Vivify {
			if s.watch.fetchers.Load() > 0 {
				c.logGet(store.Miss, key) // memcached's do_store_item looks again
			}
			digits = protocol.AppendUint(c.num[:0], f.Initial)
			if tx.Store(0, 0, 0, digits, nil) != nil {
				c.replyErr("SERVER_ERROR Out of memory allocating new item")
				return
			}
			created = true
			if s.watch.mutations.Load() > 0 { // memcached stores it with an add
				c.logStore(cmdAdd, resStored, key, 0, s.relTime(f.VivifyTTL), len(digits))
			}
		} else {
			if incr {
				c.ctr.incrMisses.Add(1)
			} else {
				c.ctr.decrMisses.Add(1)
			}
			c.out = append(c.out, 'N', 'F')
		}
	case deltaCASMismatch:
		c.out = append(c.out, 'E', 'X')
	}
	if res == deltaOK || created {
		if f.Value {
			c.out = append(c.out, 'V', 'A', ' ')
			c.out = protocol.AppendUint(c.out, uint64(len(digits)))
		} else {
			c.out = append(c.out, 'H', 'D')
		}
		for i := 2; i < t.N-1; i++ {
			switch tok := t.T[i]; tok[0] {
			case 'c':
				c.out = append(c.out, ' ', 'c')
				c.out = protocol.AppendUint(c.out, tx.CAS())
			case 't':
				c.out = append(c.out, ' ', 't')
				c.out = appendTTL(c.out, tx.TTL())
			case 'T':
				tx.Touch(s.relTime(f.Exptime))
			case 'N':
				if created {
					tx.Touch(s.relTime(f.VivifyTTL))
				}
			case 'O':
				if !c.appendOpaque(start, tok) {
					return
				}
			case 'k':
				c.out = c.metaKey(c.out, key, f.KeyBinary)
			}
		}
		if f.Value {
			c.out = append(c.out, '\r', '\n')
			c.out = append(c.out, digits...)
		}
	} else if !c.appendOpaqueKey(2, start, key, f.KeyBinary) {
		return
	}
	c.out = append(c.out, '\r', '\n')
	if skip {
		c.out = c.out[:start]
	}
}

// metaDebug is me (memcached's process_meta_command).
func (c *conn) metaDebug() {
	if c.reqErr() {
		return
	}
	key := c.req.Key
	tx := &c.tx
	c.ctr.cmdMeta.Add(1)
	if c.begin(key) != store.Hit {
		tx.End()
		c.reply("EN")
		return
	}
	c.out = append(c.out, "ME "...)
	if tx.KeyBinary() {
		c.out = protocol.Base64Encode(c.out, key)
	} else {
		c.out = append(c.out, key...)
	}
	c.out = append(c.out, " exp="...)
	if ttl := tx.TTL(); ttl < 0 {
		c.out = append(c.out, '-', '1')
	} else {
		// memcached prints current_time - exptime: minus the TTL.
		c.out = protocol.AppendInt(c.out, -ttl)
	}
	c.out = append(c.out, " la="...)
	c.out = protocol.AppendUint(c.out, uint64(max(tx.LastAccess(), 0)))
	c.out = append(c.out, " cas="...)
	c.out = protocol.AppendUint(c.out, tx.CAS())
	if tx.Fetched() {
		c.out = append(c.out, " fetch=yes"...)
	} else {
		c.out = append(c.out, " fetch=no"...)
	}
	c.out = append(c.out, " cls="...)
	c.out = protocol.AppendUint(c.out, uint64(tx.ClassID()))
	c.out = append(c.out, " size="...)
	c.out = protocol.AppendUint(c.out, uint64(tx.Size())) // the size that chose cls=, not memcached's
	c.out = append(c.out, '\r', '\n')
	tx.End()
}
