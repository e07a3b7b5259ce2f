package proxy

import (
	"context"
	"errors"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/memcache"
)

// The meta commands, over what memcache.Client can do, for connections
// off the event loops (an event loop forwards them to the servers,
// loop_req.go's startMeta, but only with these flags, so that a request
// is served alike on and off a loop). Supported flags:
//
//	mg: b c f k O q s v T (T touches with GetAndTouch)
//	ms: b C F k M (S E A P R) O q T
//	md: b q O k
//	ma: b q O k v D M (I, +, D, -); N and J only as "no autovivify"
//	mn
//
// Flags that need the item's metadata or server-side state the client does
// not expose (mg h l t u E N R, ms I, md C I T, ma N J C T t c, me) are
// refused with "CLIENT_ERROR flag X not supported by the proxy".
const (
	mgFlags = "bcfkOqsvT"
	msFlags = "bFTCqOkM"
	mdFlags = "bqOk"
	maFlags = "bqOkvDM"
)

// replyErr sends an error even under q, as memcached does for errors.
func (c *conn) replyErr(s string) {
	c.noreply = false
	c.reply(s)
}

// metaStart answers an mg, md or ma that did not parse
// (protocol.ParseTextRequest words memcached's errors per command, as the
// node sends them) and checks that every flag is one the proxy supports.
func (c *conn) metaStart(allowed string) (key []byte, ok bool) {
	r := &c.req
	if r.Err != "" {
		c.replyErr(r.Err)
		return nil, false
	}
	if !c.metaAllowed(2, allowed) {
		return nil, false
	}
	return r.Key, true
}

func (c *conn) metaAllowed(from int, allowed string) bool {
	if i, opaque := metaRefused(&c.req.Tokens, from, allowed); i > 0 {
		if opaque {
			c.replyErr("CLIENT_ERROR opaque token too long")
		} else {
			c.replyErr("CLIENT_ERROR flag " + string(c.req.T[i][:1]) + " not supported by the proxy")
		}
		return false
	}
	return true
}

// metaRefused finds the first of the flags T[from:N-1] that the proxy
// refuses: one not in allowed, or an opaque longer than memcached takes
// (opaque set). It returns the flag's index, or 0 when there is none.
func metaRefused(t *protocol.Tokens, from int, allowed string) (i int, opaque bool) {
	for i := from; i < t.N-1; i++ {
		tok := t.T[i]
		if tok[0] == 'O' && len(tok) > protocol.MetaMaxOpaqueLen {
			return i, true
		}
		ok := false
		for j := 0; j < len(allowed); j++ {
			if allowed[j] == tok[0] {
				ok = true
			}
		}
		if !ok {
			return i, false
		}
	}
	return 0, false
}

// metaKey appends " k<key>" (base64 with " b" when the key was binary).
func (c *conn) metaKey(key []byte, binary bool) {
	c.out = append(c.out, ' ', 'k')
	if binary {
		c.out = protocol.Base64Encode(c.out, key)
		c.out = append(c.out, ' ', 'b')
		return
	}
	c.out = append(c.out, key...)
}

// metaTail appends the O and k return flags in request order and CRLF.
func (c *conn) metaTail(key []byte, binary bool) {
	t := &c.req.Tokens
	for i := 2; i < t.N-1; i++ {
		switch tok := t.T[i]; tok[0] {
		case 'O':
			c.out = append(c.out, ' ')
			c.out = append(c.out, tok...)
		case 'k':
			c.metaKey(key, binary)
		}
	}
	c.out = append(c.out, '\r', '\n')
}

// metaFail replies to an upstream error of a meta command.
func (c *conn) metaFail(u *upstream, key string, err error) {
	c.replyErr(errReply(u, key, err))
}

func (c *conn) metaGet() {
	f := &c.req.Meta
	key, ok := c.metaStart(mgFlags)
	if !ok {
		return
	}
	c.noreply = f.NoReply
	k := string(key)
	u := c.p.acquire()
	defer u.release()
	var it *memcache.Item
	err := u.call(&c.rc, k, func(ctx context.Context) (err error) {
		if f.NewTTL {
			it, err = u.mc.GetAndTouchContext(ctx, k, f.Exptime)
		} else {
			it, err = u.mc.GetContext(ctx, k)
		}
		return err
	})
	c.p.ctr.cmdGet.Add(1)
	if errors.Is(err, memcache.ErrCacheMiss) || errors.Is(err, memcache.ErrMalformedKey) {
		c.p.ctr.getMisses.Add(1)
		if c.noreply {
			return
		}
		c.out = append(c.out, 'E', 'N')
		c.metaTail(key, f.KeyBinary)
		return
	}
	if err != nil {
		c.metaFail(u, k, err)
		return
	}
	c.p.ctr.getHits.Add(1)
	if f.Value {
		c.out = append(c.out, 'V', 'A', ' ')
		c.out = protocol.AppendUint(c.out, uint64(len(it.Value)))
	} else {
		c.out = append(c.out, 'H', 'D')
	}
	t := &c.req.Tokens
	for i := 2; i < t.N-1; i++ {
		switch tok := t.T[i]; tok[0] {
		case 'f':
			c.out = append(c.out, ' ', 'f')
			c.out = protocol.AppendUint(c.out, uint64(it.Flags))
		case 'c':
			c.out = append(c.out, ' ', 'c')
			c.out = protocol.AppendUint(c.out, it.CasID)
		case 's':
			c.out = append(c.out, ' ', 's')
			c.out = protocol.AppendUint(c.out, uint64(len(it.Value)))
		case 'O':
			c.out = append(c.out, ' ')
			c.out = append(c.out, tok...)
		case 'k':
			c.metaKey(key, f.KeyBinary)
		}
	}
	c.out = append(c.out, '\r', '\n')
	if f.Value {
		c.out = append(c.out, it.Value...)
		c.out = append(c.out, '\r', '\n')
	}
	// A hit under q is still sent (memcached's q hides only EN).
}

func (c *conn) metaSet(rest []byte) (used, more int) {
	r := &c.req
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
	if n > maxBody {
		return fail("SERVER_ERROR object too large for cache")
	}
	f, key := &r.Meta, r.Key
	for i := 3; i < t.N-1; i++ {
		tok := t.T[i]
		found := false
		for j := 0; j < len(msFlags); j++ {
			found = found || msFlags[j] == tok[0]
		}
		if !found {
			return fail("CLIENT_ERROR flag " + string(tok[:1]) + " not supported by the proxy")
		}
	}
	if len(rest) < n {
		return 0, n
	}
	data := rest[:n]
	if data[n-2] != '\r' || data[n-1] != '\n' {
		c.replyErr("CLIENT_ERROR bad data chunk")
		return n, 0
	}
	// key aliases c.req's buffer or the line; both stay put until we return.
	c.noreply = f.NoReply
	c.p.ctr.cmdSet.Add(1)
	c.item = memcache.Item{Key: string(key), Value: data[:n-2], Flags: f.ClientFlags, Expiration: f.Exptime, CasID: f.CAS}
	it := &c.item // the client encodes it during the call: reused
	u := c.p.acquire()
	defer u.release()
	err := u.callOnce(&c.rc, it.Key, func(ctx context.Context) error {
		if f.HasCAS {
			return u.mc.CompareAndSwapContext(ctx, it)
		}
		switch f.Mode | 0x20 {
		case 'e':
			return u.mc.AddContext(ctx, it)
		case 'a':
			return u.mc.AppendContext(ctx, it)
		case 'p':
			return u.mc.PrependContext(ctx, it)
		case 'r':
			return u.mc.ReplaceContext(ctx, it)
		}
		return u.mc.SetContext(ctx, it)
	})
	code := ""
	switch {
	case err == nil:
		code = "HD"
	case errors.Is(err, memcache.ErrNotStored):
		code = "NS"
	case errors.Is(err, memcache.ErrCASConflict):
		code = "EX"
	case errors.Is(err, memcache.ErrCacheMiss):
		code = "NF"
	default:
		c.metaFail(u, it.Key, err)
		return n, 0
	}
	if c.noreply && code == "HD" {
		return n, 0
	}
	c.out = append(c.out, code...)
	c.metaTail(key, f.KeyBinary)
	return n, 0
}

func (c *conn) metaDelete() {
	f := &c.req.Meta
	key, ok := c.metaStart(mdFlags)
	if !ok {
		return
	}
	c.noreply = f.NoReply
	k := string(key)
	u := c.p.acquire()
	defer u.release()
	err := u.callOnce(&c.rc, k, func(ctx context.Context) error { return u.mc.DeleteContext(ctx, k) })
	code := "HD"
	switch {
	case err == nil:
		c.p.ctr.deleteHits.Add(1)
		if c.noreply {
			return
		}
	case errors.Is(err, memcache.ErrCacheMiss):
		c.p.ctr.deleteMisses.Add(1)
		code = "NF"
	default:
		c.metaFail(u, k, err)
		return
	}
	c.out = append(c.out, code...)
	c.metaTail(key, f.KeyBinary)
}

func (c *conn) metaArithmetic() {
	f := &c.req.Meta
	key, ok := c.metaStart(maFlags)
	if !ok {
		return
	}
	c.noreply = f.NoReply
	incr := !c.req.Decr()
	k := string(key)
	u := c.p.acquire()
	defer u.release()
	var v uint64
	err := u.callOnce(&c.rc, k, func(ctx context.Context) (err error) {
		v, _, err = u.mc.IncrDecrContext(ctx, k, incr, f.Delta)
		return err
	})
	switch {
	case err == nil:
		if c.noreply { // q hides a success, v or not (memcached)
			return
		}
		if f.Value {
			d := protocol.AppendUint(nil, v)
			c.out = append(c.out, "VA "...)
			c.out = protocol.AppendUint(c.out, uint64(len(d)))
			c.metaTail(key, f.KeyBinary)
			c.out = append(c.out, d...)
			c.out = append(c.out, '\r', '\n')
			return
		}
		if c.noreply {
			return
		}
		c.out = append(c.out, 'H', 'D')
	case errors.Is(err, memcache.ErrCacheMiss):
		c.out = append(c.out, 'N', 'F')
	default:
		c.metaFail(u, k, err)
		return
	}
	c.metaTail(key, f.KeyBinary)
}
