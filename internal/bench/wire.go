package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"

	"github.com/vbcache/vbcache/internal/protocol"
)

// opKind is a request's kind.
type opKind uint8

const (
	opGet opKind = iota
	opSet
)

// reply is what one reply taught us. A multi-get of n keys has
// hits+misses+bad == n; a set has one of ok or bad.
type reply struct {
	hits   int // keys returned with the right key and length (gets)
	misses int // keys not returned (gets)
	bad    int // wrong key or length, or an error answer
}

// errGarbled is a reply that cannot be framed; the connection is dropped.
var errGarbled = errors.New("bench: garbled reply")

// wire encodes requests and parses replies of one protocol. Each
// connection owns one; its buffers are reused for every request.
type wire struct {
	proto Protocol
	ks    *keyspace
	value []byte // value bytes for sets: sizeMax bytes of a pattern
	kbuf  []byte // scratch: a key being encoded or checked
	breq  protocol.Request
	bhdr  protocol.Header
	sext  [8]byte // binary SET extras: flags, exptime (all zero)
}

func newWire(proto Protocol, ks *keyspace) *wire {
	v := make([]byte, ks.sizeMax)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	return &wire{proto: proto, ks: ks, value: v, kbuf: make([]byte, 0, 256)}
}

// appendGet appends a get of keys (one request, however many keys).
//
//	text:   get <k1> <k2> …\r\n
//	meta:   mg <k> v k\r\n                          (one key)
//	        mg <k1> v k q\r\n … mg <kn> v k q\r\nmn\r\n  (several)
//	binary: GETK <k>                                (one key)
//	        GETKQ <k1> … GETKQ <kn-1> GETK <kn>       (several)
func (w *wire) appendGet(dst []byte, keys []uint64) []byte {
	switch w.proto {
	case Text:
		dst = append(dst, "get"...)
		for _, k := range keys {
			dst = append(dst, ' ')
			dst = w.ks.appendKey(dst, k)
		}
		return append(dst, "\r\n"...)
	case Meta:
		if len(keys) == 1 {
			dst = append(dst, "mg "...)
			dst = w.ks.appendKey(dst, keys[0])
			return append(dst, " v k\r\n"...)
		}
		for _, k := range keys {
			dst = append(dst, "mg "...)
			dst = w.ks.appendKey(dst, k)
			dst = append(dst, " v k q\r\n"...)
		}
		return append(dst, "mn\r\n"...)
	}
	for i, k := range keys {
		w.breq = protocol.Request{}
		w.breq.Opcode = protocol.OpGetKQ
		if i == len(keys)-1 {
			w.breq.Opcode = protocol.OpGetK
		}
		w.breq.Opaque = uint32(i)
		w.kbuf = w.ks.appendKey(w.kbuf[:0], k)
		w.breq.Key = w.kbuf
		dst = protocol.AppendRequest(dst, &w.breq)
	}
	return dst
}

// appendSet appends a set of key with its value (flags 0, no expiry).
//
//	text:   set <k> 0 0 <n>\r\n<data>\r\n
//	meta:   ms <k> <n>\r\n<data>\r\n
//	binary: SET extras{flags 0, exptime 0} <k> <data>
func (w *wire) appendSet(dst []byte, key uint64) []byte {
	n := w.ks.valueSize(key)
	switch w.proto {
	case Text, Meta:
		if w.proto == Text {
			dst = append(dst, "set "...)
		} else {
			dst = append(dst, "ms "...)
		}
		dst = w.ks.appendKey(dst, key)
		if w.proto == Text {
			dst = append(dst, " 0 0 "...)
		} else {
			dst = append(dst, ' ')
		}
		dst = protocol.AppendUint(dst, uint64(n))
		dst = append(dst, "\r\n"...)
		dst = append(dst, w.value[:n]...)
		return append(dst, "\r\n"...)
	}
	w.breq = protocol.Request{}
	w.breq.Opcode = protocol.OpSet
	w.breq.Extras = w.sext[:]
	w.kbuf = w.ks.appendKey(w.kbuf[:0], key)
	w.breq.Key = w.kbuf
	w.breq.Value = w.value[:n]
	return protocol.AppendRequest(dst, &w.breq)
}

// readReply reads the whole reply to one request from r. An error means
// the stream can no longer be trusted (I/O failure or garbled framing).
func (w *wire) readReply(r *bufio.Reader, op opKind, keys []uint64) (reply, error) {
	switch w.proto {
	case Text:
		if op == opSet {
			return w.readSetReply(r)
		}
		return w.readTextGet(r, keys)
	case Meta:
		if op == opSet {
			return w.readSetReply(r)
		}
		return w.readMetaGet(r, keys)
	}
	if op == opSet {
		return w.readBinarySet(r)
	}
	return w.readBinaryGet(r, keys)
}

// readReplyLine returns the next line without its "\r\n" (the form
// internal/protocol's reply grammar takes) and the line as read, both
// valid until the next read from r. A line longer than r's buffer, or not
// ended by "\r\n", is garbled.
func readReplyLine(r *bufio.Reader) (text, line []byte, err error) {
	line, err = r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, nil, fmt.Errorf("%w: line longer than %d bytes", errGarbled, r.Size())
	}
	if err != nil {
		return nil, nil, err
	}
	text, ok := bytes.CutSuffix(line, crlf)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q", errGarbled, line)
	}
	return text, line, nil
}

// crlf ends every reply line.
var crlf = []byte("\r\n")

// readSetReply reads a set's one-line reply: STORED (meta: HD) is
// success, any other line an error answer.
func (w *wire) readSetReply(r *bufio.Reader) (reply, error) {
	text, _, err := readReplyLine(r)
	if err != nil {
		return reply{}, err
	}
	switch w.proto {
	case Text:
		if protocol.ClassifyReply(text) == protocol.ReplyStored {
			return reply{}, nil
		}
	case Meta:
		if m, ok := protocol.ParseMetaReply(text); ok && m.Code == protocol.MetaHD {
			return reply{}, nil
		}
	}
	return reply{bad: 1}, nil
}

// skipData consumes n bytes of value and the "\r\n" after them.
func skipData(r *bufio.Reader, n int) error {
	if _, err := r.Discard(n); err != nil {
		return err
	}
	end, err := r.Peek(2)
	if err != nil {
		return err
	}
	if end[0] != '\r' || end[1] != '\n' {
		return fmt.Errorf("%w: value not followed by \\r\\n", errGarbled)
	}
	_, err = r.Discard(2)
	return err
}

// match looks for got among keys[*next:], in order, and advances *next past
// it. It returns the matching key's index in keys, or -1.
func (w *wire) match(keys []uint64, next *int, got []byte) int {
	for *next < len(keys) {
		i := *next
		*next++
		w.kbuf = w.ks.appendKey(w.kbuf[:0], keys[i])
		if bytes.Equal(w.kbuf, got) {
			return i
		}
	}
	return -1
}

// check counts one returned value: a hit when it matches a requested key and
// has that key's length.
func (w *wire) check(rep *reply, keys []uint64, next *int, key []byte, size int) {
	if i := w.match(keys, next, key); i >= 0 && size == w.ks.valueSize(keys[i]) {
		rep.hits++
	} else {
		rep.bad++
	}
}

// readTextGet reads "VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n"
// blocks up to "END\r\n" (protocol.ParseValueLine).
func (w *wire) readTextGet(r *bufio.Reader, keys []uint64) (reply, error) {
	var rep reply
	next, returned := 0, 0
	for {
		text, line, err := readReplyLine(r)
		if err != nil {
			return rep, err
		}
		switch protocol.ClassifyReply(text) {
		case protocol.ReplyValue:
			v, ok := protocol.ParseValueLine(text)
			if !ok {
				return rep, fmt.Errorf("%w: %q", errGarbled, line)
			}
			returned++
			w.check(&rep, keys, &next, v.Key, v.Size)
			if err := skipData(r, v.Size); err != nil {
				return rep, err
			}
		case protocol.ReplyEnd:
			rep.misses = max(len(keys)-returned, 0)
			return rep, nil
		default:
			// ERROR, CLIENT_ERROR, SERVER_ERROR (or any other line)
			// end the reply.
			rep.bad += max(len(keys)-returned, 1)
			return rep, nil
		}
	}
}

// readMetaGet reads "VA <size> <flags>\r\n<data>\r\n" (hit) or "EN
// <flags>\r\n" (miss) for one key, or VA blocks up to "MN\r\n" for a
// quiet multi-get (protocol.ParseMetaReply).
func (w *wire) readMetaGet(r *bufio.Reader, keys []uint64) (reply, error) {
	var rep reply
	next, returned := 0, 0
	for {
		text, line, err := readReplyLine(r)
		if err != nil {
			return rep, err
		}
		m, ok := protocol.ParseMetaReply(text)
		switch {
		case m.Code == protocol.MetaVA:
			if !ok {
				return rep, fmt.Errorf("%w: %q", errGarbled, line)
			}
			key, _ := m.Flag('k') // the key, asked for with "k"
			returned++
			w.check(&rep, keys, &next, key, m.Size)
			if err := skipData(r, m.Size); err != nil {
				return rep, err
			}
			if len(keys) == 1 {
				return rep, nil
			}
		case m.Code == protocol.MetaEN && len(keys) == 1:
			// A miss; memcached echoes the k flag ("EN k<key>").
			rep.misses = 1
			return rep, nil
		case m.Code == protocol.MetaMN && ok && len(keys) > 1:
			rep.misses = max(len(keys)-returned, 0)
			return rep, nil
		default:
			// An error answer. For a multi-get it stands for one key; the
			// "mn" still closes the reply.
			returned++
			rep.bad++
			if len(keys) == 1 {
				return rep, nil
			}
		}
	}
}

// readBinaryHeader reads and checks a response header into w.bhdr.
func (w *wire) readBinaryHeader(r *bufio.Reader) error {
	b, err := r.Peek(protocol.HeaderLen)
	if err != nil {
		return err
	}
	if err := protocol.ParseHeader(b, &w.bhdr); err != nil {
		return err
	}
	if w.bhdr.Magic != protocol.MagicResponse {
		return fmt.Errorf("%w: magic 0x%02x", errGarbled, w.bhdr.Magic)
	}
	if int(w.bhdr.ExtLen)+int(w.bhdr.KeyLen) > int(w.bhdr.BodyLen) {
		return fmt.Errorf("%w: key and extras longer than the body", errGarbled)
	}
	_, err = r.Discard(protocol.HeaderLen)
	return err
}

func (w *wire) readBinarySet(r *bufio.Reader) (reply, error) {
	if err := w.readBinaryHeader(r); err != nil {
		return reply{}, err
	}
	if w.bhdr.Opcode != protocol.OpSet {
		return reply{}, fmt.Errorf("%w: opcode 0x%02x in reply to SET", errGarbled, w.bhdr.Opcode)
	}
	if _, err := r.Discard(int(w.bhdr.BodyLen)); err != nil {
		return reply{}, err
	}
	if w.bhdr.Status != protocol.StatusOK {
		return reply{bad: 1}, nil
	}
	return reply{}, nil
}

// readBinaryGet reads GETKQ hits, then the final GETK (hit or miss).
func (w *wire) readBinaryGet(r *bufio.Reader, keys []uint64) (reply, error) {
	var rep reply
	next, returned := 0, 0
	for {
		if err := w.readBinaryHeader(r); err != nil {
			return rep, err
		}
		h := &w.bhdr
		op := h.Opcode
		if op != protocol.OpGetK && op != protocol.OpGetKQ {
			return rep, fmt.Errorf("%w: opcode 0x%02x in reply to GETK", errGarbled, op)
		}
		if _, err := r.Discard(int(h.ExtLen)); err != nil {
			return rep, err
		}
		key, err := r.Peek(int(h.KeyLen))
		if err != nil {
			return rep, err
		}
		size := int(h.BodyLen) - int(h.ExtLen) - int(h.KeyLen)
		switch h.Status {
		case protocol.StatusOK:
			returned++
			w.check(&rep, keys, &next, key, size)
		case protocol.StatusKeyNotFound:
			// A miss of the final GETK; the quiet ones say nothing.
		default:
			returned++
			rep.bad++
		}
		if _, err := r.Discard(int(h.KeyLen) + size); err != nil {
			return rep, err
		}
		if op == protocol.OpGetK {
			rep.misses = max(len(keys)-returned, 0)
			return rep, nil
		}
	}
}
