package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/memcache"
)

// statusInternal is the binary status the proxy answers for an upstream
// failure; the body says what failed, as the text SERVER_ERROR line does.
const statusInternal = protocol.StatusInternal

// binError is the binary status and message (empty: the status's text)
// that answer err, an upstream error of request op (its loud opcode) on
// key, as memcached would answer the same outcome.
func binError(u *upstream, op protocol.Opcode, key string, err error) (protocol.Status, string) {
	switch {
	case errors.Is(err, memcache.ErrCacheMiss):
		return protocol.StatusKeyNotFound, ""
	case errors.Is(err, memcache.ErrCASConflict):
		return protocol.StatusKeyExists, ""
	case errors.Is(err, memcache.ErrNotStored):
		switch op {
		case protocol.OpAdd:
			return protocol.StatusKeyExists, ""
		case protocol.OpReplace:
			return protocol.StatusKeyNotFound, "" // memcached: replace of a missing key
		}
		return protocol.StatusNotStored, ""
	case !answer(err):
		return statusInternal, strings.TrimPrefix(failReply(u, key, err), "SERVER_ERROR ")
	}
	switch m := errReply(u, key, err); {
	case strings.Contains(m, "non-numeric"):
		return protocol.StatusDeltaBadValue, ""
	case strings.Contains(m, "too large"):
		return protocol.StatusTooLarge, ""
	case strings.HasPrefix(m, "CLIENT_ERROR"):
		return protocol.StatusInvalid, ""
	default:
		return statusInternal, m
	}
}

// binaryPacket serves one binary request at the front of data: the common
// key-value opcodes (the quiet variants too), Noop, Version, Stat, Quit,
// Flush and Verbosity. Anything else gets "Unknown command". A bad magic
// byte or inconsistent lengths close the connection, as memcached does.
func (c *conn) binaryPacket(data []byte) (used, more int) {
	var r protocol.Request
	n, err := protocol.ParseRequest(data, &r)
	if err != nil {
		c.close = true
		return 0, 0
	}
	if n == 0 {
		if len(data) >= protocol.HeaderLen {
			if r.BodyLen > maxBody {
				c.close = true
				return 0, 0
			}
			return 0, protocol.HeaderLen + int(r.BodyLen)
		}
		return 0, 0
	}
	op, quiet := r.Opcode.Loud()
	resp := func(status protocol.Status, cas uint64, extras, key, value []byte) {
		c.out = protocol.AppendResponse(c.out, r.Opcode, status, r.Opaque, cas, extras, key, value)
	}
	fail := func(status protocol.Status, msg string) {
		if msg == "" {
			msg = status.Text()
		}
		resp(status, 0, nil, nil, []byte(msg))
	}
	// badRequest answers a request whose lengths are wrong for its opcode
	// as memcached does: "Invalid arguments", then the connection closes.
	badRequest := func() {
		fail(protocol.StatusInvalid, "")
		c.close = true
	}
	// upErr answers an upstream error; it reports false for nil.
	upErr := func(u *upstream, key string, err error) bool {
		if err == nil {
			return false
		}
		fail(binError(u, op, key, err))
		return true
	}
	key := string(r.Key)
	keyOK := len(r.Key) > 0 && len(r.Key) <= protocol.KeyMaxLength
	switch op {
	case protocol.OpGet, protocol.OpGetK, protocol.OpGAT, protocol.OpGATK:
		touch := op == protocol.OpGAT || op == protocol.OpGATK
		if !keyOK || (touch && len(r.Extras) != 4) || (!touch && len(r.Extras) != 0) || len(r.Value) != 0 {
			badRequest()
			break
		}
		u := c.p.acquire()
		var it *memcache.Item
		err := u.call(&c.rc, key, func(ctx context.Context) (err error) {
			if touch {
				it, err = u.mc.GetAndTouchContext(ctx, key, binExptime(binary.BigEndian.Uint32(r.Extras)))
			} else {
				it, err = u.mc.GetContext(ctx, key)
			}
			return err
		})
		if touch {
			c.p.ctr.cmdTouch.Add(1)
		} else {
			c.p.ctr.cmdGet.Add(1)
		}
		var k []byte
		if op == protocol.OpGetK || op == protocol.OpGATK {
			k = r.Key
		}
		switch {
		case err == nil:
			if touch {
				c.p.ctr.touchHits.Add(1)
			} else {
				c.p.ctr.getHits.Add(1)
			}
			var ext [4]byte
			binary.BigEndian.PutUint32(ext[:], it.Flags)
			resp(protocol.StatusOK, it.CasID, ext[:], k, it.Value)
		case errors.Is(err, memcache.ErrCacheMiss):
			if touch {
				c.p.ctr.touchMisses.Add(1)
			} else {
				c.p.ctr.getMisses.Add(1)
			}
			if !quiet {
				if k != nil {
					resp(protocol.StatusKeyNotFound, 0, nil, k, nil) // GETK: the key, no text
				} else {
					resp(protocol.StatusKeyNotFound, 0, nil, nil, []byte("Not found"))
				}
			}
		default:
			upErr(u, key, err)
		}
		u.release()
	case protocol.OpSet, protocol.OpAdd, protocol.OpReplace:
		if !keyOK || len(r.Extras) != 8 {
			badRequest()
			break
		}
		c.item = memcache.Item{Key: key, Value: r.Value, Flags: binary.BigEndian.Uint32(r.Extras),
			Expiration: binExptime(binary.BigEndian.Uint32(r.Extras[4:])), CasID: r.CAS}
		it := &c.item // the client encodes it during the call: reused
		c.p.ctr.cmdSet.Add(1)
		u := c.p.acquire()
		verb := "set"
		switch {
		case op == protocol.OpAdd:
			verb = "add"
		case r.CAS != 0:
			verb = "cas" // replace with a CAS is a cas: the key must exist
		case op == protocol.OpReplace:
			verb = "replace"
		}
		var cas uint64 // the new CAS: a binary upstream's answer has it, a text one's not
		err := u.callOnce(&c.rc, key, func(ctx context.Context) (err error) {
			cas, err = u.mc.StoreContext(ctx, verb, it)
			return err
		})
		if !upErr(u, key, err) && !quiet {
			resp(protocol.StatusOK, cas, nil, nil, nil)
		}
		u.release()
	case protocol.OpAppend, protocol.OpPrepend:
		if !keyOK || len(r.Extras) != 0 {
			badRequest()
			break
		}
		c.item = memcache.Item{Key: key, Value: r.Value}
		it := &c.item // the client encodes it during the call: reused
		u := c.p.acquire()
		verb := "prepend"
		if op == protocol.OpAppend {
			verb = "append"
		}
		var cas uint64
		err := u.callOnce(&c.rc, key, func(ctx context.Context) (err error) {
			cas, err = u.mc.StoreContext(ctx, verb, it)
			return err
		})
		if !upErr(u, key, err) && !quiet {
			resp(protocol.StatusOK, cas, nil, nil, nil)
		}
		u.release()
	case protocol.OpDelete:
		if !keyOK || len(r.Extras) != 0 || len(r.Value) != 0 {
			badRequest()
			break
		}
		u := c.p.acquire()
		err := u.callOnce(&c.rc, key, func(ctx context.Context) error { return u.mc.DeleteContext(ctx, key) })
		if err == nil {
			c.p.ctr.deleteHits.Add(1)
		} else if errors.Is(err, memcache.ErrCacheMiss) {
			c.p.ctr.deleteMisses.Add(1)
		}
		if !upErr(u, key, err) && !quiet {
			resp(protocol.StatusOK, 0, nil, nil, nil)
		}
		u.release()
	case protocol.OpIncrement, protocol.OpDecrement:
		if !keyOK || len(r.Extras) != 20 || len(r.Value) != 0 {
			badRequest()
			break
		}
		delta := binary.BigEndian.Uint64(r.Extras)
		initial := binary.BigEndian.Uint64(r.Extras[8:])
		exp := binary.BigEndian.Uint32(r.Extras[16:])
		u := c.p.acquire()
		var v, cas uint64
		err := u.callOnce(&c.rc, key, func(ctx context.Context) (err error) {
			for range 2 {
				v, cas, err = u.mc.IncrDecrContext(ctx, key, op == protocol.OpIncrement, delta)
				if !errors.Is(err, memcache.ErrCacheMiss) || exp == 0xffffffff {
					return err
				}
				// Create with the initial value, as memcached does.
				cas, err = u.mc.StoreContext(ctx, "add", &memcache.Item{Key: key, Value: protocol.AppendUint(nil, initial), Expiration: binExptime(exp)})
				if err == nil {
					v = initial
					return nil
				}
				if !errors.Is(err, memcache.ErrNotStored) {
					return err
				}
			}
			return err
		})
		if !upErr(u, key, err) && !quiet {
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], v)
			resp(protocol.StatusOK, cas, nil, nil, b[:])
		}
		u.release()
	case protocol.OpTouch:
		if !keyOK || len(r.Extras) != 4 || len(r.Value) != 0 {
			badRequest()
			break
		}
		u := c.p.acquire()
		var flags uint32
		var cas uint64
		err := u.call(&c.rc, key, func(ctx context.Context) (err error) {
			flags, cas, err = u.mc.TouchItemContext(ctx, key, binExptime(binary.BigEndian.Uint32(r.Extras)))
			return err
		})
		c.p.ctr.cmdTouch.Add(1)
		if !upErr(u, key, err) {
			if cas != 0 { // a binary upstream's answer: the item's flags and CAS, as memcached gives them
				var ext [4]byte
				binary.BigEndian.PutUint32(ext[:], flags)
				resp(protocol.StatusOK, cas, ext[:], nil, nil)
			} else {
				resp(protocol.StatusOK, 0, nil, nil, nil)
			}
		}
		u.release()
	case protocol.OpNoop:
		resp(protocol.StatusOK, 0, nil, nil, nil)
	case protocol.OpVersion:
		resp(protocol.StatusOK, 0, nil, nil, []byte(c.p.Version))
	case protocol.OpQuit:
		if !quiet {
			resp(protocol.StatusOK, 0, nil, nil, nil)
		}
		c.close = true
	case protocol.OpFlush:
		if len(r.Extras) == 4 && binary.BigEndian.Uint32(r.Extras) != 0 {
			fail(protocol.StatusInvalid, "flush with a delay is not supported by the proxy")
			break
		}
		c.p.ctr.cmdFlush.Add(1)
		u := c.p.acquire()
		err := u.call(&c.rc, "", func(ctx context.Context) error { return u.mc.FlushAllContext(ctx) })
		if !upErr(u, "", err) && !quiet {
			resp(protocol.StatusOK, 0, nil, nil, nil)
		}
		u.release()
	case protocol.OpVerbosity:
		resp(protocol.StatusOK, 0, nil, nil, nil)
	case protocol.OpStat:
		if len(r.Key) != 0 {
			fail(protocol.StatusKeyNotFound, "")
			break
		}
		for _, kv := range c.p.statLines() {
			resp(protocol.StatusOK, 0, nil, []byte(kv[0]), []byte(kv[1]))
		}
		resp(protocol.StatusOK, 0, nil, nil, nil)
	default:
		fail(protocol.StatusUnknown, "")
	}
	return n, 0
}

// binExptime turns a binary request's unsigned 32-bit exptime into the
// client's int32: values past 2^31-1 are absolute times after 2038, which
// the int32 cannot carry; they become 2^31-1 (January 2038), still far in
// the future, instead of a negative "expire now".
func binExptime(e uint32) int32 {
	if e > math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(e)
}
