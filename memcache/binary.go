package memcache

import (
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/vbcache/vbcache/internal/protocol"
)

// The binary protocol's header layout, opcodes, statuses and header codec
// are internal/protocol's (binary.go); the client speaks its request side
// and parses its response side.

// noopOpaque marks the NOOP that ends a GetMulti batch.
const noopOpaque = 0xffffffff

var storeOpcodes = [...]protocol.Opcode{verbSet: protocol.OpSet, verbAdd: protocol.OpAdd,
	verbReplace: protocol.OpReplace, verbAppend: protocol.OpAppend, verbPrepend: protocol.OpPrepend,
	verbCAS: protocol.OpSet}

// appendRequestHeader appends the header of a request whose body is
// extrasLen, keyLen and valueLen bytes long.
func appendRequestHeader(b []byte, opcode protocol.Opcode, keyLen, extrasLen, valueLen int, vb uint16, opaque uint32, cas uint64) []byte {
	h := protocol.Header{
		Magic:   protocol.MagicRequest,
		Opcode:  opcode,
		KeyLen:  uint16(keyLen),
		ExtLen:  uint8(extrasLen),
		VBucket: vb,
		BodyLen: uint32(extrasLen + keyLen + valueLen),
		Opaque:  opaque,
		CAS:     cas,
	}
	return protocol.AppendHeader(b, &h)
}

func (o *op) appendBinary(b []byte) []byte {
	switch o.kind {
	case opGet:
		b = appendRequestHeader(b, protocol.OpGet, len(o.key), 0, 0, o.vb, 0, 0)
		b = append(b, o.key...)
	case opGat:
		b = appendRequestHeader(b, protocol.OpGAT, len(o.key), 4, 0, o.vb, 0, 0)
		b = binary.BigEndian.AppendUint32(b, binExpiry(int32(o.delta)))
		b = append(b, o.key...)
	case opMulti:
		// One quiet GETKQ per key (opaque = its index; misses stay
		// silent), then a NOOP whose answer ends the batch.
		// One header updated per key: appendRequestHeader is not
		// inlined, and a second call per key would cost the batch.
		h := protocol.Header{Magic: protocol.MagicRequest, Opcode: protocol.OpGetKQ}
		for i, k := range o.keys {
			h.VBucket = 0
			if o.vbs != nil {
				h.VBucket = o.vbs[i]
			}
			h.KeyLen, h.BodyLen, h.Opaque = uint16(len(k)), uint32(len(k)), uint32(i)
			b = protocol.AppendHeader(b, &h)
			b = append(b, k...)
		}
		b = appendRequestHeader(b, protocol.OpNoop, 0, 0, 0, 0, noopOpaque, 0)
	case opStore:
		it := o.item
		var cas uint64
		if o.verb == verbCAS {
			cas = it.CasID
		}
		if o.verb == verbAppend || o.verb == verbPrepend {
			b = appendRequestHeader(b, storeOpcodes[o.verb], len(it.Key), 0, len(it.Value), o.vb, 0, cas)
		} else {
			// extras: flags(4) expiration(4)
			b = appendRequestHeader(b, storeOpcodes[o.verb], len(it.Key), 8, len(it.Value), o.vb, 0, cas)
			b = binary.BigEndian.AppendUint32(b, it.Flags)
			b = binary.BigEndian.AppendUint32(b, binExpiry(it.Expiration))
		}
		b = append(b, it.Key...)
		b = append(b, it.Value...)
	case opDelete:
		b = appendRequestHeader(b, protocol.OpDelete, len(o.key), 0, 0, o.vb, 0, 0)
		b = append(b, o.key...)
	case opTouch:
		b = appendRequestHeader(b, protocol.OpTouch, len(o.key), 4, 0, o.vb, 0, 0)
		b = binary.BigEndian.AppendUint32(b, binExpiry(int32(o.delta)))
		b = append(b, o.key...)
	case opIncr, opDecr:
		opc := protocol.OpIncrement
		if o.kind == opDecr {
			opc = protocol.OpDecrement
		}
		// extras: delta(8) initial(8) expiration(4); expiration
		// 0xffffffff means "do not create", so a missing key is a miss as
		// in the text protocol.
		b = appendRequestHeader(b, opc, len(o.key), 20, 0, o.vb, 0, 0)
		b = binary.BigEndian.AppendUint64(b, o.delta)
		b = binary.BigEndian.AppendUint64(b, 0)
		b = binary.BigEndian.AppendUint32(b, 0xffffffff)
		b = append(b, o.key...)
	case opFlush:
		b = appendRequestHeader(b, protocol.OpFlush, 0, 0, 0, 0, 0, 0)
	case opVersion:
		b = appendRequestHeader(b, protocol.OpVersion, 0, 0, 0, 0, 0, 0)
	case opConfig:
		if o.haveRev {
			b = appendRequestHeader(b, protocol.OpGetClusterConfig, 0, 16, 0, 0, 0, 0)
			b = binary.BigEndian.AppendUint64(b, uint64(o.rev[0]))
			b = binary.BigEndian.AppendUint64(b, uint64(o.rev[1]))
		} else {
			b = appendRequestHeader(b, protocol.OpGetClusterConfig, 0, 0, 0, 0, 0, 0)
		}
	}
	return b
}

// binStatusError maps a status that is not special to the command.
func binStatusError(status protocol.Status, body []byte) error {
	switch status {
	case protocol.StatusKeyNotFound:
		return ErrCacheMiss
	case protocol.StatusNotStored:
		return ErrNotStored
	case protocol.StatusTmpFail:
		return errTemporaryFailureAnswer
	}
	msg := "status 0x" + strconv.FormatUint(uint64(status), 16)
	if len(body) > 0 && len(body) < 256 {
		msg += ": " + string(body)
	}
	if status == protocol.StatusSyncWriteAmbiguous {
		return &serverError{msg: msg, wraps: errors.Join(ErrSyncWriteAmbiguous, ErrServerError)}
	}
	// 0x82 out of memory, 0x84/0x85/0x86 internal errors and busy:
	// server errors; the rest are the client's mistakes.
	return &serverError{msg: msg, isServer: status >= protocol.StatusNoMemory}
}

func (o *op) parseBinary(b []byte) (int, bool, error) {
	consumed := 0
	var h protocol.Header
	for {
		rest := b[consumed:]
		if protocol.ParseHeader(rest, &h) != nil {
			return consumed, false, nil // not a whole header yet
		}
		if h.Magic != protocol.MagicResponse {
			return 0, false, badResponse("binary magic", rest[:protocol.HeaderLen])
		}
		opcode, status, opaque, cas := h.Opcode, h.Status, h.Opaque, h.CAS
		keyLen, extLen, bodyLen := int(h.KeyLen), int(h.ExtLen), int(h.BodyLen)
		if extLen+keyLen > bodyLen || bodyLen > 1<<30 {
			return 0, false, badResponse("binary lengths", rest[:protocol.HeaderLen])
		}
		if len(rest) < protocol.HeaderLen+bodyLen {
			return consumed, false, nil
		}
		body := rest[protocol.HeaderLen : protocol.HeaderLen+bodyLen]
		extras, key, value := body[:extLen], body[extLen:extLen+keyLen], body[extLen+keyLen:]
		consumed += protocol.HeaderLen + bodyLen

		if o.kind == opMulti {
			if opcode == protocol.OpNoop && opaque == noopOpaque {
				return consumed, true, nil
			}
			if opcode != protocol.OpGetKQ || int(opaque) >= len(o.keys) {
				return 0, false, badResponse("binary reply in a multi-get", rest[:protocol.HeaderLen])
			}
			if status == protocol.StatusNotMyVBucket {
				// Not this server's key: no value, the caller retries
				// the key (cluster) or reports ErrNotMyVBucket.
				o.refused = append(o.refused, int(opaque))
				if o.body == nil && len(value) > 0 {
					o.body = append([]byte(nil), value...)
				}
				continue
			}
			if status != protocol.StatusOK {
				if o.err == nil && status != protocol.StatusKeyNotFound {
					o.err = binStatusError(status, value)
				}
				continue
			}
			if len(extras) < 4 || string(key) != o.keys[opaque] {
				return 0, false, badResponse("GETKQ reply", rest[:protocol.HeaderLen])
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
func (o *op) binaryAnswer(status protocol.Status, extras, value []byte, cas uint64) error {
	if status != protocol.StatusOK {
		switch {
		case status == protocol.StatusNotMyVBucket:
			// The answer carries no value; its body is the node's
			// config, which a cluster client learns from.
			o.err = errNotMyVBucketAnswer
			if len(value) > 0 {
				o.body = append([]byte(nil), value...)
			}
		case o.kind == opStore && status == protocol.StatusKeyExists:
			if o.verb == verbCAS {
				o.err = ErrCASConflict
			} else {
				o.err = ErrNotStored // add of an existing key
			}
		case o.kind == opStore && status == protocol.StatusKeyNotFound && o.verb != verbCAS:
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
