package proxy

import (
	"context"
	"errors"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/memcache"
)

// The meta commands, over what memcache.Client can do. Supported flags:
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

// metaStart checks the key and flags of mg, md and ma (memcached's
// process_m*_command preambles, as the node words them: tooLong and
// badFlags differ per command, an empty badFlags meaning the pre-parser's
// own message, and mg forces its first errors past noreply while md and ma
// do not) and that every flag is one the proxy supports.
func (c *conn) metaStart(f *protocol.MetaFlags, allowed, tooLong, badFlags string, force bool) (key []byte, ok bool) {
	t := &c.toks
	if t.N < 3 {
		c.reply("ERROR")
		return nil, false
	}
	say := c.reply
	if force {
		say = c.replyErr
	}
	if len(t.T[1]) > protocol.KeyMaxLength {
		say(protocol.ErrBadFormat)
		return nil, false
	}
	if t.N > protocol.MetaMaxTokens {
		say(tooLong)
		return nil, false
	}
	key, ok = protocol.ParseMetaFlags(t, 2, f, c.keyBuf[:])
	if !ok {
		switch {
		case badFlags != "":
			c.replyErr(badFlags)
		case f.Err != "":
			c.replyErr(f.Err)
		default:
			c.replyErr(protocol.ErrBadFormat)
		}
		return nil, false
	}
	if !c.metaAllowed(2, allowed) {
		return nil, false
	}
	return key, true
}

func (c *conn) metaAllowed(from int, allowed string) bool {
	t := &c.toks
	for i := from; i < t.N-1; i++ {
		tok := t.T[i]
		if tok[0] == 'O' && len(tok) > protocol.MetaMaxOpaqueLen {
			c.replyErr("CLIENT_ERROR opaque token too long")
			return false
		}
		ok := false
		for j := 0; j < len(allowed); j++ {
			if allowed[j] == tok[0] {
				ok = true
			}
		}
		if !ok {
			c.replyErr("CLIENT_ERROR flag " + string(tok[:1]) + " not supported by the proxy")
			return false
		}
	}
	return true
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
	t := &c.toks
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
	var f protocol.MetaFlags
	key, ok := c.metaStart(&f, mgFlags, "CLIENT_ERROR options flags are too long", "", true)
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
	t := &c.toks
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
	t := &c.toks
	if t.N < 3 {
		c.reply("ERROR")
		return 0, 0
	}
	if len(t.T[1]) > protocol.KeyMaxLength || t.N == 3 {
		c.replyErr(protocol.ErrBadFormat)
		return 0, 0
	}
	if t.N > protocol.MetaMaxTokens {
		c.replyErr("CLIENT_ERROR options flags too long")
		return 0, 0
	}
	vlen, ok := protocol.ParseInt32(t.T[2])
	if !ok || vlen < 0 || vlen > 1<<31-1-2 {
		c.replyErr(protocol.ErrBadFormat)
		return 0, 0
	}
	n := int(vlen) + 2
	fail := func(msg string) (int, int) {
		c.replyErr(msg)
		if n > len(rest) {
			c.swallow = n - len(rest)
		}
		return min(n, len(rest)), 0
	}
	if n > maxBody {
		return fail("SERVER_ERROR object too large for cache")
	}
	var f protocol.MetaFlags
	key, ok := protocol.ParseMetaFlags(t, 3, &f, c.keyBuf[:])
	if !ok {
		if f.Err == "" {
			return fail(protocol.ErrBadFormat)
		}
		return fail(f.Err)
	}
	for i := 3; i < t.N-1; i++ {
		tok := t.T[i]
		if tok[0] == 'O' && len(tok) > protocol.MetaMaxOpaqueLen {
			return fail("CLIENT_ERROR opaque token too long")
		}
		found := false
		for j := 0; j < len(msFlags); j++ {
			found = found || msFlags[j] == tok[0]
		}
		if !found {
			return fail("CLIENT_ERROR flag " + string(tok[:1]) + " not supported by the proxy")
		}
	}
	switch f.Mode { // memcached 1.6.18 takes upper case only
	case 0, 'S', 'E', 'A', 'P', 'R':
	default:
		return fail("CLIENT_ERROR invalid mode for ms M token")
	}
	if len(rest) < n {
		return 0, n
	}
	data := rest[:n]
	if data[n-2] != '\r' || data[n-1] != '\n' {
		c.replyErr("CLIENT_ERROR bad data chunk")
		return n, 0
	}
	// key aliases c.keyBuf or the line; both stay put until we return.
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
	var f protocol.MetaFlags
	key, ok := c.metaStart(&f, mdFlags, "CLIENT_ERROR options flags too long", "CLIENT_ERROR invalid or duplicate flag", false)
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
	var f protocol.MetaFlags
	f.Delta = 1
	key, ok := c.metaStart(&f, maFlags, "CLIENT_ERROR options flags too long", "CLIENT_ERROR invalid or duplicate flag", false)
	if !ok {
		return
	}
	c.noreply = f.NoReply
	incr := true
	switch f.Mode {
	case 0, 'I', '+': // memcached 1.6.18 takes upper case only
	case 'D', '-':
		incr = false
	default:
		c.replyErr("CLIENT_ERROR invalid mode for ma M token")
		return
	}
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
