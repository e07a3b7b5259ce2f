package proxy

import (
	"bytes"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
)

// Clients' logins (Config.ClientAuth, vbcache proxy --client-auth): until
// a connection has logged in, the loop hands its input here instead of
// routing it. A binary client logs in as memcached's -S clients do, with
// SASL PLAIN (SASL_LIST_MECHS answers "PLAIN"; any other request is
// answered "Auth failure." with status 0x20); a text client as -Y's do,
// with "set <any> <flags> <exptime> <n>" whose data is "<user> <password>"
// (STORED; anything else is answered CLIENT_ERROR unauthenticated). PLAIN
// sends the password as it is: use it with the TLS listener. Nothing is
// sent upstream before the login, so the replies here need no ordering
// with requests in flight.

// login serves the request at the front of data on a connection that has
// not logged in: the bytes used, or more > 0 when the request needs that
// many, or (0, 0) when it is not whole yet.
func (c *conn) login(t *sasl.Passwords, data []byte) (used, more int) {
	if c.mode == 2 {
		return c.loginBinary(t, data)
	}
	return c.loginText(t, data)
}

func (c *conn) loginBinary(t *sasl.Passwords, data []byte) (used, more int) {
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
	answer := func(st protocol.Status, value string) {
		c.out = protocol.AppendResponse(c.out, r.Opcode, st, r.Opaque, 0, nil, nil, []byte(value))
	}
	switch r.Opcode {
	case protocol.OpSASLList:
		answer(protocol.StatusOK, "PLAIN")
	case protocol.OpSASLAuth:
		c.p.ctr.authCmds.Add(1)
		// PLAIN: authzid NUL authcid NUL password.
		f := bytes.SplitN(r.Value, []byte{0}, 3)
		if string(r.Key) == "PLAIN" && len(f) == 3 && t.Check(string(f[1]), string(f[2])) {
			c.authed = true
			answer(protocol.StatusOK, "Authenticated")
			break
		}
		c.p.ctr.authErrors.Add(1)
		answer(protocol.StatusAuthError, protocol.StatusAuthError.Text())
	case protocol.OpQuit:
		c.close = true
	default:
		answer(protocol.StatusAuthError, protocol.StatusAuthError.Text())
	}
	return n, 0
}

func (c *conn) loginText(t *sasl.Passwords, data []byte) (used, more int) {
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		if len(data) > protocol.LineMaxNoNewline {
			c.close = true
		}
		return 0, 0
	}
	r := &c.req
	protocol.ParseTextRequest(protocol.TrimLine(data[:nl]), r)
	if r.Err != "" || r.Cmd != protocol.CmdSet || r.Bytes > 4096 {
		c.replyErr("CLIENT_ERROR unauthenticated")
		return nl + 1, 0
	}
	n := r.Bytes // the token and its "\r\n"
	if len(data)-(nl+1) < n {
		return 0, nl + 1 + n
	}
	token := data[nl+1 : nl+1+n]
	c.p.ctr.authCmds.Add(1)
	f := bytes.Fields(token[:n-2])
	if token[n-2] == '\r' && token[n-1] == '\n' && len(f) == 2 && t.Check(string(f[0]), string(f[1])) {
		c.authed = true
		c.replyErr("STORED")
	} else {
		c.p.ctr.authErrors.Add(1)
		c.replyErr("CLIENT_ERROR authentication failure")
	}
	return nl + 1 + n, 0
}
