package memcache

import (
	"encoding/binary"
	"strconv"
)

// Binary protocol (memcached doc/protocol-binary.txt). Every packet starts
// with a 24-byte header:
//
//	Byte/     0       |       1       |       2       |       3       |
//	   +---------------+---------------+---------------+---------------+
//	  0| magic         | opcode        | key length                    |
//	  4| extras length | data type     | vbucket id (req) / status (res)|
//	  8| total body length (extras + key + value)                      |
//	 12| opaque (echoed back)                                          |
//	 16| cas                                                           |
//	 20|                                                               |
//	   +---------------+---------------+---------------+---------------+
//
// followed by extras, key and value. All integers are big-endian.
const (
	binHeaderLen = 24
	magicReq     = 0x80
	magicRes     = 0x81

	cmdGet     = 0x00
	cmdSet     = 0x01
	cmdAdd     = 0x02
	cmdReplace = 0x03
	cmdDelete  = 0x04
	cmdIncr    = 0x05
	cmdDecr    = 0x06
	cmdFlush   = 0x08
	cmdNoop    = 0x0a
	cmdVersion = 0x0b
	cmdGetKQ   = 0x0d
	cmdAppend  = 0x0e
	cmdPrepend = 0x0f
	cmdTouch   = 0x1c
	cmdGAT     = 0x1d

	cmdGetClusterConfig = 0xb5

	statusOK        = 0x00
	statusNotFound  = 0x01
	statusExists    = 0x02
	statusNotStored = 0x05
	statusNotMyVB   = 0x07

	noopOpaque = 0xffffffff // marks the NOOP that ends a GetMulti batch
)

var storeOpcodes = [...]byte{verbSet: cmdSet, verbAdd: cmdAdd, verbReplace: cmdReplace,
	verbAppend: cmdAppend, verbPrepend: cmdPrepend, verbCAS: cmdSet}

// appendHeader appends a request header.
func appendHeader(b []byte, opcode byte, keyLen, extrasLen, valueLen int, vb uint16, opaque uint32, cas uint64) []byte {
	var h [binHeaderLen]byte
	h[0] = magicReq
	h[1] = opcode
	binary.BigEndian.PutUint16(h[2:], uint16(keyLen))
	h[4] = byte(extrasLen)
	binary.BigEndian.PutUint16(h[6:], vb)
	binary.BigEndian.PutUint32(h[8:], uint32(extrasLen+keyLen+valueLen))
	binary.BigEndian.PutUint32(h[12:], opaque)
	binary.BigEndian.PutUint64(h[16:], cas)
	return append(b, h[:]...)
}

func (o *op) appendBinary(b []byte) []byte {
	switch o.kind {
	case opGet:
		b = appendHeader(b, cmdGet, len(o.key), 0, 0, o.vb, 0, 0)
		b = append(b, o.key...)
	case opGat:
		b = appendHeader(b, cmdGAT, len(o.key), 4, 0, o.vb, 0, 0)
		b = binary.BigEndian.AppendUint32(b, binExpiry(int32(o.delta)))
		b = append(b, o.key...)
	case opMulti:
		// One quiet GETKQ per key (opaque = its index; misses stay
		// silent), then a NOOP whose answer ends the batch.
		for i, k := range o.keys {
			var vb uint16
			if o.vbs != nil {
				vb = o.vbs[i]
			}
			b = appendHeader(b, cmdGetKQ, len(k), 0, 0, vb, uint32(i), 0)
			b = append(b, k...)
		}
		b = appendHeader(b, cmdNoop, 0, 0, 0, 0, noopOpaque, 0)
	case opStore:
		it := o.item
		var cas uint64
		if o.verb == verbCAS {
			cas = it.CasID
		}
		if o.verb == verbAppend || o.verb == verbPrepend {
			b = appendHeader(b, storeOpcodes[o.verb], len(it.Key), 0, len(it.Value), o.vb, 0, cas)
		} else {
			// extras: flags(4) expiration(4)
			b = appendHeader(b, storeOpcodes[o.verb], len(it.Key), 8, len(it.Value), o.vb, 0, cas)
			b = binary.BigEndian.AppendUint32(b, it.Flags)
			b = binary.BigEndian.AppendUint32(b, binExpiry(it.Expiration))
		}
		b = append(b, it.Key...)
		b = append(b, it.Value...)
	case opDelete:
		b = appendHeader(b, cmdDelete, len(o.key), 0, 0, o.vb, 0, 0)
		b = append(b, o.key...)
	case opTouch:
		b = appendHeader(b, cmdTouch, len(o.key), 4, 0, o.vb, 0, 0)
		b = binary.BigEndian.AppendUint32(b, binExpiry(int32(o.delta)))
		b = append(b, o.key...)
	case opIncr, opDecr:
		opc := byte(cmdIncr)
		if o.kind == opDecr {
			opc = cmdDecr
		}
		// extras: delta(8) initial(8) expiration(4); expiration
		// 0xffffffff means "do not create", so a missing key is a miss as
		// in the text protocol.
		b = appendHeader(b, opc, len(o.key), 20, 0, o.vb, 0, 0)
		b = binary.BigEndian.AppendUint64(b, o.delta)
		b = binary.BigEndian.AppendUint64(b, 0)
		b = binary.BigEndian.AppendUint32(b, 0xffffffff)
		b = append(b, o.key...)
	case opFlush:
		b = appendHeader(b, cmdFlush, 0, 0, 0, 0, 0, 0)
	case opVersion:
		b = appendHeader(b, cmdVersion, 0, 0, 0, 0, 0, 0)
	case opConfig:
		if o.haveRev {
			b = appendHeader(b, cmdGetClusterConfig, 0, 16, 0, 0, 0, 0)
			b = binary.BigEndian.AppendUint64(b, uint64(o.rev[0]))
			b = binary.BigEndian.AppendUint64(b, uint64(o.rev[1]))
		} else {
			b = appendHeader(b, cmdGetClusterConfig, 0, 0, 0, 0, 0, 0)
		}
	}
	return b
}

// binStatusError maps a status that is not special to the command.
func binStatusError(status uint16, body []byte) error {
	switch status {
	case statusNotFound:
		return ErrCacheMiss
	case statusNotStored:
		return ErrNotStored
	case statusTmpFail:
		return errTemporaryFailureAnswer
	}
	msg := "status 0x" + strconv.FormatUint(uint64(status), 16)
	if len(body) > 0 && len(body) < 256 {
		msg += ": " + string(body)
	}
	// 0x82 out of memory, 0x84/0x85/0x86 internal errors and busy:
	// server errors; the rest are the client's mistakes.
	return &serverError{msg: msg, isServer: status >= 0x82}
}

func (o *op) parseBinary(b []byte) (int, bool, error) {
	consumed := 0
	for {
		rest := b[consumed:]
		if len(rest) < binHeaderLen {
			return consumed, false, nil
		}
		if rest[0] != magicRes {
			return 0, false, badResponse("binary magic", rest[:binHeaderLen])
		}
		opcode := rest[1]
		keyLen := int(binary.BigEndian.Uint16(rest[2:]))
		extLen := int(rest[4])
		status := binary.BigEndian.Uint16(rest[6:])
		bodyLen := int(binary.BigEndian.Uint32(rest[8:]))
		opaque := binary.BigEndian.Uint32(rest[12:])
		cas := binary.BigEndian.Uint64(rest[16:])
		if extLen+keyLen > bodyLen || bodyLen > 1<<30 {
			return 0, false, badResponse("binary lengths", rest[:binHeaderLen])
		}
		if len(rest) < binHeaderLen+bodyLen {
			return consumed, false, nil
		}
		body := rest[binHeaderLen : binHeaderLen+bodyLen]
		extras, key, value := body[:extLen], body[extLen:extLen+keyLen], body[extLen+keyLen:]
		consumed += binHeaderLen + bodyLen

		if o.kind == opMulti {
			if opcode == cmdNoop && opaque == noopOpaque {
				return consumed, true, nil
			}
			if opcode != cmdGetKQ || int(opaque) >= len(o.keys) {
				return 0, false, badResponse("binary reply in a multi-get", rest[:binHeaderLen])
			}
			if status == statusNotMyVB {
				// Not this server's key: no value, the caller retries
				// the key (cluster) or reports ErrNotMyVBucket.
				o.refused = append(o.refused, int(opaque))
				if o.body == nil && len(value) > 0 {
					o.body = append([]byte(nil), value...)
				}
				continue
			}
			if status != statusOK {
				if o.err == nil && status != statusNotFound {
					o.err = binStatusError(status, value)
				}
				continue
			}
			if len(extras) < 4 || string(key) != o.keys[opaque] {
				return 0, false, badResponse("GETKQ reply", rest[:binHeaderLen])
			}
			if o.items == nil {
				o.items = make([]Item, 0, len(o.keys))
			}
			o.items = append(o.items, Item{Key: o.keys[opaque], Value: o.carve(value),
				Flags: binary.BigEndian.Uint32(extras), CasID: cas})
			continue
		}
		return consumed, true, o.binaryAnswer(status, extras, value, cas)
	}
}

// binaryAnswer fills o from a single-response command's reply. It returns
// an error only for a garbled reply.
func (o *op) binaryAnswer(status uint16, extras, value []byte, cas uint64) error {
	if status != statusOK {
		switch {
		case status == statusNotMyVB:
			// The answer carries no value; its body is the node's
			// config, which a cluster client learns from.
			o.err = errNotMyVBucketAnswer
			if len(value) > 0 {
				o.body = append([]byte(nil), value...)
			}
		case o.kind == opStore && status == statusExists:
			if o.verb == verbCAS {
				o.err = ErrCASConflict
			} else {
				o.err = ErrNotStored // add of an existing key
			}
		case o.kind == opStore && status == statusNotFound && o.verb != verbCAS:
			o.err = ErrNotStored // replace/append/prepend of a missing key
		default:
			o.err = binStatusError(status, value)
		}
		return nil
	}
	switch o.kind {
	case opGet, opGat:
		if len(extras) < 4 {
			return badResponse("get reply without flags", extras)
		}
		o.setItem(binary.BigEndian.Uint32(extras), cas, value)
	case opStore:
		o.stored = cas // StoreContext returns it
	case opTouch:
		o.stored = cas // TouchItemContext returns it, and the flags
		if len(extras) >= 4 {
			o.n = uint64(binary.BigEndian.Uint32(extras))
		}
	case opIncr, opDecr:
		if len(value) != 8 {
			return badResponse("incr/decr reply", value)
		}
		o.n = binary.BigEndian.Uint64(value)
		o.stored = cas // IncrDecrContext returns it
	case opConfig:
		o.body = append([]byte(nil), value...)
	}
	return nil
}

// binExpiry is an expiration as the binary protocol carries it. A negative
// one means "already expired", as the text protocol sends it; the binary
// field is unsigned, where -1 would read as a time in 2106, so it goes as
// an absolute time in 1970 past memcached's 30-day line, which memcached
// (and vbcache) take as already expired.
func binExpiry(e int32) uint32 {
	if e < 0 {
		return expiredAbs
	}
	return uint32(e)
}

// expiredAbs is 30 days and one second after the epoch.
const expiredAbs = 60*60*24*30 + 1
