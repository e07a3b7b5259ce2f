package server

import (
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/store"
)

// The binary protocol follows memcached 1.6.18's proto_bin.c: a request is
// dispatched once its header, extras and key have arrived; commands that
// carry a value then wait for it (a value too large for the cache is
// discarded as it arrives). Quiet variants answer only errors (and, for
// GetQ/GetKQ, hits), and memcached's validation of extras and key lengths
// per opcode is kept exactly, because clients and proxies rely on the
// "Invalid arguments, then close" answer.
//
// One deliberate difference: for an unknown opcode memcached discards
// bodylen bytes after the extras and key it has already consumed, which
// eats the start of the next request. vbcache discards only the value part,
// so the connection stays in step.

// binaryPacket handles the packet at the front of data. It returns how many
// bytes it consumed, or need > 0 (bytes from the start of data) when the
// packet is not complete yet and nothing was done.
func (c *conn) binaryPacket(data []byte) (used, need int) {
	s := c.s
	if len(data) < protocol.HeaderLen {
		return 0, 0
	}
	h := &c.bh
	protocol.ParseHeader(data, h)
	if h.Magic != protocol.MagicRequest {
		c.close = true
		return 0, 0
	}
	hk := protocol.HeaderLen + int(h.ExtLen) + int(h.KeyLen)
	if len(data) < hk {
		return 0, hk
	}
	extras := data[protocol.HeaderLen : protocol.HeaderLen+int(h.ExtLen)]
	key := data[protocol.HeaderLen+int(h.ExtLen) : hk]
	keylen, extlen, bodylen := int(h.KeyLen), int(h.ExtLen), int(h.BodyLen)
	if keylen > bodylen || keylen+extlen > bodylen {
		c.binError(protocol.StatusUnknown)
		c.close = true
		return hk, 0
	}
	op, quiet := h.Opcode.Loud()
	if s.cfg.SASL && !c.authed {
		switch op {
		case protocol.OpSASLList, protocol.OpSASLAuth, protocol.OpSASLStep, protocol.OpVersion:
		default:
			if s.cl != nil && preAuthClusterOp(op) {
				break // HELLO, GET_ERROR_MAP (bootstrap.go)
			}
			c.binError(protocol.StatusAuthError)
			c.close = true
			return hk, 0
		}
	}
	c.bquiet = quiet
	// HELLO's key is the client's agent description (gocbcore sends
	// JSON), not an item key: cluster mode does not bound it.
	if keylen > protocol.KeyMaxLength && !(s.cl != nil && op == protocol.OpHello) {
		return hk, c.binProtocolError()
	}
	// memcached computes the value length in a C int: a body length of
	// 2 GiB or more makes it negative, so nothing is read as the value and
	// the rest of the stream is parsed as the next header.
	vlen := int(int32(uint32(bodylen - keylen - extlen)))
	if s.cl != nil {
		if used, need, handled := c.binCluster(op, extras, key, data[hk:], vlen, hk); handled {
			return used, need
		}
	}
	switch op {
	case protocol.OpVersion:
		if extlen != 0 || keylen != 0 || bodylen != 0 {
			return hk, c.binProtocolError()
		}
		c.binOKString(0, s.cfg.Version)
	case protocol.OpFlush:
		if keylen != 0 || bodylen != extlen || (extlen != 0 && extlen != 4) {
			return hk, c.binProtocolError()
		}
		c.binFlush(extras)
	case protocol.OpNoop:
		if extlen != 0 || keylen != 0 || bodylen != 0 {
			return hk, c.binProtocolError()
		}
		c.binOK(0, nil, nil, nil)
	case protocol.OpSet, protocol.OpAdd, protocol.OpReplace:
		if extlen != 8 || keylen == 0 || bodylen < keylen+8 {
			return hk, c.binProtocolError()
		}
		return c.binUpdate(op, extras, key, data[hk:], vlen, hk)
	case protocol.OpAppend, protocol.OpPrepend:
		if keylen == 0 || extlen != 0 {
			return hk, c.binProtocolError()
		}
		return c.binUpdate(op, nil, key, data[hk:], vlen, hk)
	case protocol.OpGet, protocol.OpGetK:
		if extlen != 0 || bodylen != keylen || keylen == 0 {
			return hk, c.binProtocolError()
		}
		c.binGet(op, nil, key)
	case protocol.OpTouch, protocol.OpGAT, protocol.OpGATK:
		if extlen != 4 || keylen == 0 {
			return hk, c.binProtocolError()
		}
		c.binGet(op, extras, key)
	case protocol.OpDelete:
		if keylen == 0 || extlen != 0 || bodylen != keylen {
			return hk, c.binProtocolError()
		}
		c.binDelete(key)
	case protocol.OpIncrement, protocol.OpDecrement:
		if keylen == 0 || extlen != 20 || bodylen != keylen+extlen {
			return hk, c.binProtocolError()
		}
		c.binArithmetic(op == protocol.OpIncrement, extras, key)
	case protocol.OpStat:
		if extlen != 0 {
			return hk, c.binProtocolError()
		}
		c.binStats(key)
	case protocol.OpQuit:
		if keylen != 0 || extlen != 0 || bodylen != 0 {
			return hk, c.binProtocolError()
		}
		c.binOK(0, nil, nil, nil)
		c.close = true
		c.closeWhy = closeNormal
	case protocol.OpSASLList:
		if extlen != 0 || keylen != 0 || bodylen != 0 {
			return hk, c.binProtocolError()
		}
		c.saslList()
	case protocol.OpSASLAuth, protocol.OpSASLStep:
		if extlen != 0 || keylen == 0 {
			return hk, c.binProtocolError()
		}
		return c.saslAuth(op, key, data[hk:], vlen, hk)
	default:
		c.binError(protocol.StatusUnknown)
		c.swallowData(vlen, data[hk:])
		return hk + min(max(vlen, 0), len(data)-hk), 0
	}
	return hk, 0
}

// binProtocolError is memcached's handle_binary_protocol_error: Invalid
// arguments, then close.
func (c *conn) binProtocolError() int {
	c.binError(protocol.StatusInvalid)
	c.close = true
	return 0
}

// binError appends an error response with memcached's text for status.
func (c *conn) binError(st protocol.Status) {
	c.binErrorText(st, st.Text())
}

func (c *conn) binErrorText(st protocol.Status, text string) {
	h := protocol.Header{
		Magic:   protocol.MagicResponse,
		Opcode:  c.bh.Opcode,
		Status:  st,
		BodyLen: uint32(len(text)),
		Opaque:  c.bh.Opaque,
	}
	c.out = protocol.AppendHeader(c.out, &h)
	c.out = append(c.out, text...)
}

// binOK appends a success response unless the request was quiet
// (memcached's write_bin_response).
func (c *conn) binOK(cas uint64, extras, key, value []byte) {
	if c.bquiet {
		return
	}
	c.out = protocol.AppendResponse(c.out, c.bh.Opcode, protocol.StatusOK, c.bh.Opaque, cas, extras, key, value)
}

func (c *conn) binOKString(cas uint64, value string) {
	if c.bquiet {
		return
	}
	h := protocol.Header{
		Magic:   protocol.MagicResponse,
		Opcode:  c.bh.Opcode,
		BodyLen: uint32(len(value)),
		Opaque:  c.bh.Opaque,
		CAS:     cas,
	}
	c.out = protocol.AppendHeader(c.out, &h)
	c.out = append(c.out, value...)
}

// binUpdate serves Set, Add, Replace (extras: flags and exptime), Append and
// Prepend (memcached's process_bin_update, process_bin_append_prepend and
// complete_update_bin). rest holds the bytes after the key; hk is the
// offset of the value in the packet.
func (c *conn) binUpdate(op protocol.Opcode, extras, key, rest []byte, vlen, hk int) (used, need int) {
	s := c.s
	var flags, exp uint32
	if extras != nil {
		flags = binary.BigEndian.Uint32(extras[0:4])
		exp = binary.BigEndian.Uint32(extras[4:8])
	}
	if vlen < 0 || s.tooLarge(len(key), flags, vlen) {
		if s.detailEnabled.Load() {
			s.detail.recordSet(key)
		}
		c.binError(protocol.StatusTooLarge)
		if op == protocol.OpSet {
			if c.begin(key) == store.Hit {
				c.tx.Delete()
			}
			c.tx.End()
		}
		c.swallowData(vlen, rest)
		return hk + min(max(vlen, 0), len(rest)), 0
	}
	if len(rest) < vlen {
		if !c.roomFor(rest, vlen) {
			return hk + c.refuseNoMemory(op == protocol.OpSet, key, vlen, rest, func() {
				c.binError(protocol.StatusNoMemory)
			}), 0
		}
		return 0, hk + vlen
	}
	if s.detailEnabled.Load() {
		s.detail.recordSet(key)
	}
	var sc storeCmd
	switch op {
	case protocol.OpSet:
		sc = cmdSet
	case protocol.OpAdd:
		sc = cmdAdd
	case protocol.OpReplace:
		sc = cmdReplace
	case protocol.OpAppend:
		sc = cmdAppend
	case protocol.OpPrepend:
		sc = cmdPrepend
	}
	if c.bh.CAS != 0 && (sc == cmdSet || sc == cmdAdd || sc == cmdReplace) {
		sc = cmdCAS
	}
	setCtr := &c.ctr.class[classIdx(s.store.ClassFor(len(key), flags, vlen))].cmdSet
	res, cas := c.storeItem(sc, key, flags, s.store.RelTime(int64(exp)), rest[:vlen], c.bh.CAS, false, false)
	if res == resNoMemory {
		c.binErrorText(protocol.StatusNoMemory, "Out of memory allocating item")
		return hk + vlen, 0
	}
	setCtr.Add(1)
	switch res {
	case resStored:
		c.binOK(cas, nil, nil, nil)
	case resExists:
		c.binError(protocol.StatusKeyExists)
	case resNotFound:
		c.binError(protocol.StatusKeyNotFound)
	default:
		switch sc {
		case cmdAdd:
			c.binError(protocol.StatusKeyExists)
		case cmdReplace:
			c.binError(protocol.StatusKeyNotFound)
		default:
			c.binError(protocol.StatusNotStored)
		}
	}
	return hk + vlen, 0
}

// binGet serves Get, GetK, Touch, GAT and GATK and their quiet forms
// (memcached's process_bin_get_or_touch).
func (c *conn) binGet(op protocol.Opcode, extras, key []byte) {
	s := c.s
	touch := op == protocol.OpTouch || op == protocol.OpGAT || op == protocol.OpGATK
	retKey := op == protocol.OpGetK || op == protocol.OpGATK
	var exptime uint32
	if touch {
		exptime = s.store.RelTime(int64(binary.BigEndian.Uint32(extras)))
	}
	tx := &c.tx
	oc := c.begin(key)
	hit := oc == store.Hit
	if hit {
		if touch {
			tx.Touch(exptime)
		}
		tx.Bump()
		cls := classIdx(tx.ClassID())
		if touch {
			c.ctr.cmdTouch.Add(1)
			c.ctr.class[cls].touchHits.Add(1)
		} else {
			c.ctr.cmdGet.Add(1)
			c.ctr.lruHits[cls].Add(1)
		}
		var fl [4]byte
		binary.BigEndian.PutUint32(fl[:], tx.Flags())
		var k, v []byte
		if retKey {
			k = key
		}
		if op != protocol.OpTouch {
			v = tx.Value()
		}
		c.out = protocol.AppendResponse(c.out, c.bh.Opcode, protocol.StatusOK, c.bh.Opaque, tx.CAS(), fl[:], k, v)
		tx.End()
	} else {
		tx.End()
		c.countMiss(oc, touch)
		if !c.bquiet {
			if retKey {
				// memcached's write_bin_miss_response: the key, as key.
				c.out = protocol.AppendResponse(c.out, c.bh.Opcode, protocol.StatusKeyNotFound, c.bh.Opaque, 0, nil, key, nil)
			} else {
				c.binError(protocol.StatusKeyNotFound)
			}
		}
	}
	if s.detailEnabled.Load() {
		s.detail.recordGet(key, hit)
	}
}

// binDelete is memcached's process_bin_delete.
func (c *conn) binDelete(key []byte) {
	s := c.s
	if s.detailEnabled.Load() {
		s.detail.recordDelete(key)
	}
	tx := &c.tx
	if c.begin(key) != store.Hit {
		tx.End()
		c.binError(protocol.StatusKeyNotFound)
		c.ctr.deleteMisses.Add(1)
		return
	}
	if cas := c.bh.CAS; cas != 0 && cas != tx.CAS() {
		tx.End()
		c.binError(protocol.StatusKeyExists)
		return
	}
	c.ctr.class[classIdx(tx.ClassID())].deleteHits.Add(1)
	tx.Delete()
	tx.End()
	c.binOK(0, nil, nil, nil)
}

// binArithmetic is memcached's complete_incr_bin: extras are delta (8),
// initial (8) and expiration (4); an expiration of 0xffffffff means a miss
// is not created.
func (c *conn) binArithmetic(incr bool, extras, key []byte) {
	s := c.s
	delta := binary.BigEndian.Uint64(extras[0:8])
	initial := binary.BigEndian.Uint64(extras[8:16])
	exp := binary.BigEndian.Uint32(extras[16:20])
	tx := &c.tx
	c.begin(key)
	defer tx.End()
	res, digits := c.addDelta(incr, delta, c.bh.CAS)
	var val [8]byte
	switch res {
	case deltaOK:
		v, _ := protocol.ParseUint64(digits)
		binary.BigEndian.PutUint64(val[:], v)
		c.binOK(tx.CAS(), nil, nil, val[:])
	case deltaNonNumeric:
		c.binError(protocol.StatusDeltaBadValue)
	case deltaNoMemory:
		c.binErrorText(protocol.StatusNoMemory, "Out of memory incrementing value")
	case deltaCASMismatch:
		c.binError(protocol.StatusKeyExists)
	case deltaNotFound:
		if exp == 0xffffffff {
			if incr {
				c.ctr.incrMisses.Add(1)
			} else {
				c.ctr.decrMisses.Add(1)
			}
			c.binError(protocol.StatusKeyNotFound)
			return
		}
		if s.watch.fetchers.Load() > 0 {
			c.logGet(store.Miss, key) // memcached's do_store_item looks again
		}
		digits = protocol.AppendUint(c.num[:0], initial)
		if s.tooLarge(len(key), 0, len(digits)) {
			c.binErrorText(protocol.StatusNoMemory, "Out of memory allocating new item")
			return
		}
		if err := tx.Store(0, s.store.RelTime(int64(exp)), 0, digits, nil); err != nil {
			c.binErrorText(protocol.StatusNoMemory, "Out of memory allocating new item")
			return
		}
		if s.watch.mutations.Load() > 0 { // memcached stores it with an add
			c.logStore(cmdAdd, resStored, key, 0, s.store.RelTime(int64(exp)), len(digits))
		}
		binary.BigEndian.PutUint64(val[:], initial)
		c.binOK(tx.CAS(), nil, nil, val[:])
	}
}

// binFlush is memcached's process_bin_flush.
func (c *conn) binFlush(extras []byte) {
	if c.s.cfg.DisableFlush {
		c.binError(protocol.StatusAuthError)
		return
	}
	var exp int64
	if len(extras) == 4 {
		exp = int64(binary.BigEndian.Uint32(extras))
	}
	c.s.flush(exp)
	c.ctr.cmdFlush.Add(1)
	c.binOK(0, nil, nil, nil)
}

// binStats is memcached's process_bin_stat: one response per statistic,
// ended by an empty one.
func (c *conn) binStats(group []byte) {
	s := c.s
	c.binStat = true
	defer func() { c.binStat = false }()
	g := string(group)
	switch {
	case len(g) == 0:
		c.generalStats()
	case len(g) >= 5 && g[:5] == "reset":
		s.resetStats()
	case len(g) >= 8 && g[:8] == "settings":
		c.settingsStats()
	case len(g) >= 6 && g[:6] == "detail":
		rest := g[6:]
		switch {
		case len(rest) >= 5 && rest[:5] == " dump":
			dump := s.detail.dump(nil)
			dump = append(dump, "END\r\n"...)
			c.statLine("detailed", string(dump))
		case len(rest) >= 3 && rest[:3] == " on":
			s.detailEnabled.Store(true)
		case len(rest) >= 4 && rest[:4] == " off":
			s.detailEnabled.Store(false)
		default:
			c.binStat = false
			c.binError(protocol.StatusKeyNotFound)
			return
		}
	case g == "items":
		c.itemStats()
	case g == "slabs":
		c.slabStats()
	case g == "sizes":
		c.statLine("sizes_status", "disabled")
	case (g == "vbucket" || strings.HasPrefix(g, "vbucket ")) && s.cl != nil:
		c.vbucketStats(binVBArg(g))
	case (g == "streams" || strings.HasPrefix(g, "streams ")) && s.cl != nil:
		c.streamStats(binVBArg(g))
	default:
		c.binStat = false
		c.binError(protocol.StatusKeyNotFound)
		return
	}
	c.statLine("", "")
}

// binVBArg is the vbucket number after a binary stats group's name (-1:
// none).
func binVBArg(g string) int {
	if _, a, ok := strings.Cut(g, " "); ok {
		if n, err := strconv.Atoi(a); err == nil && n >= 0 {
			return n
		}
	}
	return -1
}

// appendStatPacket appends one Stat response (memcached's append_bin_stats).
func (c *conn) appendStatPacket(name, value string) {
	h := protocol.Header{
		Magic:   protocol.MagicResponse,
		Opcode:  protocol.OpStat,
		KeyLen:  uint16(len(name)),
		BodyLen: uint32(len(name) + len(value)),
		Opaque:  c.bh.Opaque,
	}
	c.out = protocol.AppendHeader(c.out, &h)
	c.out = append(c.out, name...)
	c.out = append(c.out, value...)
}
