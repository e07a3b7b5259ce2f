package proxy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strings"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/memcache"
)

// What the proxy answers without its servers: the requests a loop does
// not forward (loop_client.go's command and binary say which: local),
// answered in their turn on the loop (inline). They are errors and
// refusals, worded as memcached words them (protocol.ParseTextRequest's
// errors, which the node sends too) or as the proxy's own refusals:
//
//   - a text line that did not parse, a get's key longer than memcached
//     takes, a storage command's value too large or a bad data chunk,
//     flush_all with a delay, me, shutdown, an unknown command (a line
//     that looks like HTTP closes the connection, as memcached closes
//     it), a long line that is not a get (garbage: it closes);
//   - a meta flag the proxy does not forward (below);
//   - a binary request whose lengths do not fit its opcode ("Invalid
//     arguments", then the connection closes, as memcached does), an
//     unknown opcode, a stats group, a flush with a delay.
//
// The meta flags the loops forward are those whose answers the proxy
// has always given alike on every path; the others (mg h l t u E N R, ms
// I, md C I T, ma N J C T t c) are refused with "CLIENT_ERROR flag X not
// supported by the proxy":
//
//	mg: b c f k O q s v T
//	ms: b C F k M O q T
//	md: b q O k
//	ma: b q O k v D M
const (
	mgFlags = "bcfkOqsvT"
	msFlags = "bFTCqOkM"
	mdFlags = "bqOk"
	maFlags = "bqOkvDM"
)

// notLocal answers a request that reached this file although the loop
// forwards it: a request the loop's and this file's checks disagree on.
// It is a bug, answered as a failure rather than left unanswered.
const notLocal = "SERVER_ERROR proxy: a request it forwards was answered locally"

func (c *conn) reply(s string) {
	if c.noreply {
		return
	}
	c.out = append(c.out, s...)
	c.out = append(c.out, '\r', '\n')
}

// replyErr sends an error even under noreply or q, as memcached does.
func (c *conn) replyErr(s string) {
	c.noreply = false
	c.reply(s)
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

// textCommand answers the text request at the front of data: it returns
// the bytes used, or more > 0 when the request needs that many bytes in
// all, or (0, 0) when the line is not complete.
func (c *conn) textCommand(data []byte) (used, more int) {
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		if len(data) > protocol.LineMaxNoNewline {
			// memcached: a long line that is not a get is garbage; close.
			p := 0
			for p < len(data) && data[p] == ' ' {
				p++
			}
			if p > 100 || !(bytes.HasPrefix(data[p:], []byte("get ")) || bytes.HasPrefix(data[p:], []byte("gets "))) ||
				len(data) >= maxGetLine {
				c.close = true
				return 0, 0
			}
		}
		return 0, 0
	}
	line := protocol.TrimLine(data[:nl])
	u, m := c.dispatch(line, data[nl+1:])
	if m > 0 {
		return 0, nl + 1 + m
	}
	return nl + 1 + u, 0
}

// dispatch answers one text command line; rest holds the bytes after the
// line. It returns the bytes of rest used, or more > 0 when the command
// needs that many bytes of rest first.
func (c *conn) dispatch(line, rest []byte) (used, more int) {
	r := &c.req
	c.noreply = false
	protocol.ParseTextRequest(line, r)
	switch r.Cmd {
	case protocol.CmdMetaGet:
		c.metaRefuse(2, mgFlags)
	case protocol.CmdMetaSet:
		return c.metaSet(rest)
	case protocol.CmdMetaDelete:
		c.metaRefuse(2, mdFlags)
	case protocol.CmdMetaArith:
		c.metaRefuse(2, maFlags)
	case protocol.CmdMetaNoop:
		c.reply("MN")
	case protocol.CmdMetaDebug:
		c.reply("CLIENT_ERROR me is not supported by the proxy")
	case protocol.CmdGet, protocol.CmdGets, protocol.CmdGat, protocol.CmdGats:
		c.get()
	case protocol.CmdSet, protocol.CmdAdd, protocol.CmdReplace, protocol.CmdAppend, protocol.CmdPrepend, protocol.CmdCas:
		return c.update(rest)
	case protocol.CmdIncr, protocol.CmdDecr, protocol.CmdDelete, protocol.CmdTouch:
		if !c.reqErr() {
			c.replyErr(notLocal)
		}
	case protocol.CmdStats:
		c.stats()
	case protocol.CmdFlushAll:
		switch {
		case c.reqErr():
		case r.Exptime > 0:
			c.reply("CLIENT_ERROR flush_all with a delay is not supported by the proxy")
		default:
			c.replyErr(notLocal)
		}
	case protocol.CmdVersion:
		c.reply("VERSION " + c.p.Version)
	case protocol.CmdQuit:
		c.close = true
	case protocol.CmdVerbosity:
		if !c.reqErr() {
			c.p.verbosity.Store(int32(min(r.Level, 2)))
			c.reply("OK")
		}
	case protocol.CmdShutdown:
		c.reply("ERROR: shutdown not enabled")
	default:
		// A command the proxy does not serve. memcached drops connections
		// that look like HTTP requests.
		if r.LooksHTTP() {
			c.close = true
			break
		}
		c.reply(protocol.ErrUnknown)
	}
	return 0, 0
}

// get answers a get, gets, gat or gats that did not parse, that has a
// key longer than memcached takes (memcached checks each key as it
// answers it; the proxy checks them all before it asks a server), or
// that has no key ("gat 0": END, as memcached answers).
func (c *conn) get() {
	r := &c.req
	t := &r.Tokens
	if c.reqErr() {
		return
	}
	keys := 0
	for first := r.First; ; first = 0 {
		for i := first; i < t.N-1; i++ {
			if len(t.T[i]) > protocol.KeyMaxLength {
				c.reply("CLIENT_ERROR bad command line format")
				return
			}
			keys++
		}
		if !r.NextKeys() {
			break
		}
	}
	if keys == 0 {
		c.out = append(c.out, "END\r\n"...)
		return
	}
	c.replyErr(notLocal)
}

// update answers a storage command that did not parse, whose value is
// larger than the proxy takes (refused, its data swallowed, as memcached
// refuses a too large item) or whose data block does not end in "\r\n".
func (c *conn) update(rest []byte) (used, more int) {
	r := &c.req
	if c.reqErr() {
		return 0, 0
	}
	n := r.Bytes
	if n > maxBody {
		c.replyErr("SERVER_ERROR object too large for cache")
		if n > len(rest) {
			c.swallow = n - len(rest)
		}
		return min(n, len(rest)), 0
	}
	if len(rest) < n {
		return 0, n
	}
	c.p.ctr.cmdSet.Add(1)
	if rest[n-2] != '\r' || rest[n-1] != '\n' {
		c.replyErr("CLIENT_ERROR bad data chunk")
		return n, 0
	}
	c.replyErr(notLocal)
	return n, 0
}

// metaRefuse answers an mg, md or ma that did not parse
// (protocol.ParseTextRequest words memcached's errors per command, as the
// node sends them) or has a flag the proxy does not forward.
func (c *conn) metaRefuse(from int, allowed string) {
	switch {
	case c.req.Err != "":
		c.replyErr(c.req.Err)
	case c.metaAllowed(from, allowed):
		c.replyErr(notLocal)
	}
}

// metaSet is metaRefuse for ms, which also refuses a value larger than
// the proxy takes and a bad data chunk; a refused ms's data is
// discarded.
func (c *conn) metaSet(rest []byte) (used, more int) {
	r := &c.req
	n := r.Bytes
	if r.Err != "" {
		used, c.swallow = r.Refuse(c.replyErr, len(rest))
		return used, 0
	}
	if n > maxBody {
		c.replyErr("SERVER_ERROR object too large for cache")
		used, c.swallow = r.Skip(len(rest))
		return used, 0
	}
	if !c.metaAllowed(3, msFlags) {
		used, c.swallow = r.Skip(len(rest))
		return used, 0
	}
	if len(rest) < n {
		return 0, n
	}
	if rest[n-2] != '\r' || rest[n-1] != '\n' {
		c.replyErr("CLIENT_ERROR bad data chunk")
		return n, 0
	}
	c.replyErr(notLocal)
	return n, 0
}

// metaAllowed answers a meta request with a flag the proxy refuses (or
// an opaque longer than memcached takes) and reports whether there was
// none.
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
		if strings.IndexByte(allowed, tok[0]) < 0 {
			return i, false
		}
	}
	return 0, false
}

// binaryPacket answers the binary request at the front of data that the
// loop does not forward. It returns the bytes used, or more > 0 when the
// request needs that many bytes in all, or (0, 0) when the header is not
// whole. A bad magic byte or inconsistent lengths close the connection,
// as memcached does.
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
	fail := func(status protocol.Status, msg string) {
		if msg == "" {
			msg = status.Text()
		}
		c.out = protocol.AppendResponse(c.out, r.Opcode, status, r.Opaque, 0, nil, nil, []byte(msg))
	}
	switch op, _ := r.Opcode.Loud(); op {
	case protocol.OpGet, protocol.OpGetK, protocol.OpGAT, protocol.OpGATK, protocol.OpSet, protocol.OpAdd,
		protocol.OpReplace, protocol.OpAppend, protocol.OpPrepend, protocol.OpDelete, protocol.OpIncrement,
		protocol.OpDecrement, protocol.OpTouch:
		// Lengths that do not fit the opcode (loop_client.go's binary):
		// memcached answers "Invalid arguments" and closes.
		fail(protocol.StatusInvalid, "")
		c.close = true
	case protocol.OpFlush:
		fail(protocol.StatusInvalid, "flush with a delay is not supported by the proxy")
	case protocol.OpStat:
		fail(protocol.StatusKeyNotFound, "") // a stats group
	default:
		fail(protocol.StatusUnknown, "")
	}
	return n, 0
}

// failReply is the reply to an upstream failure: memcached's
// SERVER_ERROR line, naming the upstream and the reason.
func failReply(u *upstream, key string, err error) string {
	return failReplyAddr(u.addrOf(key), err)
}

// failReplyAddr is failReply for the server at addr.
func failReplyAddr(addr string, err error) string {
	reason := err.Error()
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		reason = "timeout"
	case errors.Is(err, memcache.ErrNotMyVBucket):
		reason = "vbucket map did not settle"
	case errors.Is(err, memcache.ErrTemporaryFailure):
		reason = "temporary failure"
	}
	reason = strings.TrimPrefix(reason, "memcache: ")
	reason = strings.Map(func(r rune) rune {
		if r < ' ' {
			return ' '
		}
		return r
	}, reason)
	if len(reason) > 200 {
		reason = reason[:200]
	}
	return "SERVER_ERROR proxy upstream " + addr + ": " + reason
}
