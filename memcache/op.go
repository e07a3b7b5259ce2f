package memcache

import (
	"bytes"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
)

// opKind is the command an op carries.
type opKind uint8

const (
	opGet     opKind = iota // gets <key> (Get)
	opGat                   // gats <exp> <key> (GetAndTouch)
	opMulti                 // gets <k1> … <kn> (GetMulti, one server's share)
	opStore                 // set/add/replace/append/prepend/cas
	opDelete                // delete
	opTouch                 // touch
	opIncr                  // incr
	opDecr                  // decr
	opFlush                 // flush_all
	opVersion               // version (Ping)
	opConfig                // binary GET_CLUSTER_CONFIG (cluster clients only)
)

// storeVerb is the command of an opStore.
type storeVerb uint8

const (
	verbSet storeVerb = iota
	verbAdd
	verbReplace
	verbAppend
	verbPrepend
	verbCAS
)

var storeVerbs = [...]string{"set", "add", "replace", "append", "prepend", "cas"}

// op states: the waiter and the reader race to move an op out of
// opWaiting. The reader's complete moves it to opDone and wakes the
// waiter, who returns it to the pool; a waiter whose context ends first
// moves it to opAbandoned, and complete then returns it to the pool.
const (
	opWaiting uint32 = iota
	opDone
	opAbandoned
)

// An op is one request to one server and, once done, its response. Ops are
// pooled: one Get costs no op allocation.
type op struct {
	kind  opKind
	verb  storeVerb
	vb    uint16 // binary: vbucket id for the header
	key   string
	keys  []string // opMulti: the keys sent, in order (kept by putOp for reuse)
	idx   []int32  // opMulti: each of keys' index in the caller's key list (kept for reuse)
	vbs   []uint16 // opMulti, binary: each key's vbucket (nil: all 0)
	item  *Item    // opStore: the item to store; opGet/opGat: the result
	delta uint64   // opIncr/opDecr; opGat: expiration; opTouch: expiration

	// Results.
	err    error
	n      uint64 // incr/decr result; opTouch over binary: the item's flags
	stored uint64 // opStore, opIncr/opDecr, opTouch over binary: the item's new CAS (text: 0)
	items  []Item // opMulti hits
	arena  []byte // opMulti: value storage, carved into Item.Value
	next   int    // opMulti: index in keys of the next expected hit
	// scratch (opMulti): items and arena are only lent to the caller
	// (GetMultiFunc), so putOp keeps them for the op's next use.
	scratch bool
	got     bool // opGet/opGat: the VALUE block has been read

	// Cluster (binary only).
	haveRev bool     // opConfig: send rev as {epoch, rev} extras
	rev     [2]int64 // opConfig: the (revEpoch, rev) the client holds
	body    []byte   // opConfig: the config JSON; NOT_MY_VBUCKET: its body
	refused []int    // opMulti: indices in keys answered NOT_MY_VBUCKET

	asyncFields // an asynchronous op's (async.go)

	sent time.Time // when conn.send queued it: its answer is due sent+timeout

	state atomic.Uint32
	done  chan struct{} // receives once when the op completes
}

var opPool = sync.Pool{New: func() any { return &op{done: make(chan struct{}, 1)} }}

func getOp(kind opKind) *op {
	o := opPool.Get().(*op)
	o.kind = kind
	o.state.Store(opWaiting)
	return o
}

// maxKept bounds the buffers putOp keeps for reuse: a pooled op does not
// pin a huge multi-get's memory.
const maxKept = 64 << 10

// putOp clears o's references and returns it to the pool. An opMulti's
// key lists never leave the client and are kept (emptied) for reuse, and
// so are its items and arena when they were only lent (o.scratch).
func putOp(o *op) {
	keys, idx := o.keys, o.idx
	if cap(keys) > maxKept/16 {
		keys, idx = nil, nil
	}
	clear(keys)
	var items []Item
	var arena []byte
	if o.scratch && cap(o.arena) <= maxKept && cap(o.items) <= maxKept/64 {
		items, arena = o.items, o.arena
		clear(items)
	}
	*o = op{done: o.done, keys: keys[:0], idx: idx[:0], items: items[:0], arena: arena[:0]}
	opPool.Put(o)
}

// complete hands o to its waiter, or recycles it if the waiter left; an
// asynchronous op goes to its Completion.
// complete hands o's outcome to its waiter or Completion. It returns the
// Completion when that is a Flusher, which the caller must flush.
func (o *op) complete() Flusher {
	if o.cb != nil {
		return o.finishAsync()
	}
	if o.state.CompareAndSwap(opWaiting, opDone) {
		o.done <- struct{}{}
		return nil
	}
	putOp(o)
	return nil
}

// resetForRetry clears the results of a completed single-key op so that it
// can be sent again.
func (o *op) resetForRetry() {
	if o.kind == opGet || o.kind == opGat {
		o.item = nil
	}
	o.err, o.n, o.stored, o.got, o.body = nil, 0, 0, false, nil
	o.state.Store(opWaiting)
}

// appendRequest encodes o's request in proto.
func (o *op) appendRequest(b []byte, proto Protocol) []byte {
	if proto == Binary {
		return o.appendBinary(b)
	}
	return o.appendText(b)
}

// Text requests (memcached doc/protocol.txt):
//
//	gets <key>\r\n
//	gats <exptime> <key>\r\n
//	gets <key1> <key2> …\r\n
//	<verb> <key> <flags> <exptime> <bytes>[ <cas>]\r\n<data>\r\n
//	delete <key>\r\n
//	touch <key> <exptime>\r\n
//	incr|decr <key> <delta>\r\n
//	flush_all\r\n
//	version\r\n
func (o *op) appendText(b []byte) []byte {
	switch o.kind {
	case opGet:
		b = append(b, "gets "...)
		b = append(b, o.key...)
	case opGat:
		b = append(b, "gats "...)
		b = strconv.AppendInt(b, int64(int32(o.delta)), 10)
		b = append(b, ' ')
		b = append(b, o.key...)
	case opMulti:
		b = append(b, "gets"...)
		for _, k := range o.keys {
			b = append(b, ' ')
			b = append(b, k...)
		}
	case opStore:
		it := o.item
		b = append(b, storeVerbs[o.verb]...)
		b = append(b, ' ')
		b = append(b, it.Key...)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(it.Flags), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(it.Expiration), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(len(it.Value)), 10)
		if o.verb == verbCAS {
			b = append(b, ' ')
			b = strconv.AppendUint(b, it.CasID, 10)
		}
		b = append(b, "\r\n"...)
		b = append(b, it.Value...)
	case opDelete:
		b = append(b, "delete "...)
		b = append(b, o.key...)
	case opTouch:
		b = append(b, "touch "...)
		b = append(b, o.key...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(int32(o.delta)), 10)
	case opIncr, opDecr:
		if o.kind == opIncr {
			b = append(b, "incr "...)
		} else {
			b = append(b, "decr "...)
		}
		b = append(b, o.key...)
		b = append(b, ' ')
		b = strconv.AppendUint(b, o.delta, 10)
	case opFlush:
		b = append(b, "flush_all"...)
	case opVersion:
		b = append(b, "version"...)
	}
	return append(b, "\r\n"...)
}

// errBadResponse is wrapped by every parse failure: the stream is garbled
// and the conn must go.
var errBadResponse = errors.New("memcache: malformed response")

func badResponse(what string, line []byte) error {
	if len(line) > 64 {
		line = line[:64]
	}
	return &parseError{what: what, line: string(line)}
}

type parseError struct{ what, line string }

func (e *parseError) Error() string {
	return errBadResponse.Error() + ": " + e.what + ": " + strconv.Quote(e.line)
}

func (e *parseError) Unwrap() error { return errBadResponse }

// parse consumes from b as much of o's response as is complete. It returns
// the bytes consumed, whether the response is complete, and an error only
// when the stream is garbled (answers go to o.err).
func (o *op) parse(b []byte, proto Protocol) (int, bool, error) {
	if proto == Binary {
		return o.parseBinary(b)
	}
	return o.parseText(b)
}

// line returns the first line of b without its "\r\n" and the length with
// it, or n == 0 when the line is not complete.
func line(b []byte) (l []byte, n int, err error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if len(b) > maxLine {
			return nil, 0, badResponse("line too long", b)
		}
		return nil, 0, nil
	}
	if i == 0 || b[i-1] != '\r' {
		return nil, 0, badResponse("line not ended by \\r\\n", b[:i])
	}
	return b[:i-1], i + 1, nil
}

// answerLine turns an error line (of kind k) into an answer: SERVER_ERROR,
// CLIENT_ERROR, ERROR. It returns nil for other lines.
func answerLine(k protocol.ReplyKind, l []byte) error {
	switch k {
	case protocol.ReplyServerError:
		msg := bytes.TrimSpace(l[len("SERVER_ERROR"):])
		if bytes.HasPrefix(msg, []byte("sync replication timed out")) {
			// A vbcache node's text answer for ErrSyncWriteAmbiguous.
			return &serverError{msg: "server error: " + string(msg), wraps: errors.Join(ErrSyncWriteAmbiguous, ErrServerError)}
		}
		return &serverError{msg: "server error: " + string(msg), isServer: true}
	case protocol.ReplyClientError:
		return &serverError{msg: "client error: " + string(bytes.TrimSpace(l[len("CLIENT_ERROR"):]))}
	case protocol.ReplyError:
		return &serverError{msg: "server replied ERROR (unknown command)"}
	}
	return nil
}

func (o *op) parseText(b []byte) (int, bool, error) {
	switch o.kind {
	case opGet, opGat, opMulti:
		return o.parseTextValues(b)
	}
	l, n, err := line(b)
	if n == 0 {
		return 0, false, err
	}
	k := protocol.ClassifyReply(l)
	if e := answerLine(k, l); e != nil {
		o.err = e
		return n, true, nil
	}
	switch o.kind {
	case opStore:
		switch k {
		case protocol.ReplyStored:
		case protocol.ReplyNotStored:
			o.err = ErrNotStored
		case protocol.ReplyExists:
			o.err = ErrCASConflict
		case protocol.ReplyNotFound:
			o.err = ErrCacheMiss
		default:
			return 0, false, badResponse("store reply", l)
		}
	case opDelete:
		o.err = expect(k, l, protocol.ReplyDeleted)
	case opTouch:
		o.err = expect(k, l, protocol.ReplyTouched)
	case opIncr, opDecr:
		if k == protocol.ReplyNotFound {
			o.err = ErrCacheMiss
			break
		}
		v, ok := protocol.ParseIncrReply(l)
		if !ok {
			return 0, false, badResponse("incr/decr reply", l)
		}
		o.n = v
	case opFlush:
		if k != protocol.ReplyOK {
			return 0, false, badResponse("flush_all reply", l)
		}
	case opVersion:
		if k != protocol.ReplyVersion {
			return 0, false, badResponse("version reply", l)
		}
	}
	return n, true, nil
}

// expect maps a line l of kind want to nil and NOT_FOUND to ErrCacheMiss.
func expect(k protocol.ReplyKind, l []byte, want protocol.ReplyKind) error {
	switch k {
	case want:
		return nil
	case protocol.ReplyNotFound:
		return ErrCacheMiss
	}
	return &serverError{msg: "unexpected reply " + strconv.Quote(string(l))}
}

// parseTextValues reads VALUE blocks up to END (protocol.ParseValueLine):
//
//	VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n … END\r\n
func (o *op) parseTextValues(b []byte) (int, bool, error) {
	consumed := 0
	for {
		l, n, err := line(b[consumed:])
		if n == 0 {
			return consumed, false, err
		}
		switch k := protocol.ClassifyReply(l); k {
		case protocol.ReplyEnd:
			if (o.kind == opGet || o.kind == opGat) && !o.got {
				o.err = ErrCacheMiss
			}
			return consumed + n, true, nil
		case protocol.ReplyValue:
		default:
			if e := answerLine(k, l); e != nil {
				o.err = e
				return consumed + n, true, nil
			}
			return 0, false, badResponse("get reply", l)
		}
		v, ok := protocol.ParseValueLine(l)
		if !ok {
			return 0, false, badResponse("VALUE line", l)
		}
		end := consumed + n + v.Size + 2
		if end > len(b) {
			return consumed, false, nil // wait for the whole block
		}
		data := b[consumed+n : consumed+n+v.Size]
		if b[end-2] != '\r' || b[end-1] != '\n' {
			return 0, false, badResponse("value not ended by \\r\\n", l)
		}
		if err := o.gotValue(v.Key, v.Flags, v.CAS, data); err != nil {
			return 0, false, err
		}
		consumed = end
	}
}

// setItem stores a single-key get's hit. A waiter gets an Item of its
// own; an asynchronous op's Completion gets the op's own Item over the
// op's arena, valid until Complete returns (finishAsync), so that the
// hit costs no allocation.
func (o *op) setItem(flags uint32, cas uint64, data []byte) {
	if o.cb != nil {
		o.arena = append(o.arena[:0], data...)
		o.scratch = true
		o.own = Item{Key: o.key, Value: o.arena, Flags: flags, CasID: cas}
		o.item = &o.own
		return
	}
	v := make([]byte, len(data))
	copy(v, data)
	o.item = &Item{Key: o.key, Value: v, Flags: flags, CasID: cas}
}

// gotValue stores one hit.
func (o *op) gotValue(key []byte, flags uint32, cas uint64, data []byte) error {
	if o.kind != opMulti {
		if string(key) != o.key || o.got {
			return badResponse("reply for another key", key)
		}
		o.got = true
		o.setItem(flags, cas, data)
		return nil
	}
	k, ok := o.matchKey(key)
	if !ok {
		return badResponse("reply for a key not asked", key)
	}
	if o.items == nil {
		o.items = make([]Item, 0, len(o.keys))
	}
	o.items = append(o.items, Item{Key: k, Value: o.carve(data), Flags: flags, CasID: cas})
	return nil
}

// matchKey finds the requested key equal to key. Servers answer in request
// order, so it is almost always the next one.
func (o *op) matchKey(key []byte) (string, bool) {
	for i := o.next; i < len(o.keys); i++ {
		if o.keys[i] == string(key) {
			o.next = i + 1
			return o.keys[i], true
		}
	}
	for i := 0; i < o.next && i < len(o.keys); i++ {
		if o.keys[i] == string(key) {
			return o.keys[i], true
		}
	}
	return "", false
}

// carve copies data into the op's arena and returns the copy, with its
// capacity capped at its length.
func (o *op) carve(data []byte) []byte {
	if cap(o.arena)-len(o.arena) < len(data) {
		size := max(4096, 2*cap(o.arena), len(data))
		o.arena = make([]byte, 0, size)
	}
	s := len(o.arena)
	o.arena = append(o.arena, data...)
	return o.arena[s:len(o.arena):len(o.arena)]
}
