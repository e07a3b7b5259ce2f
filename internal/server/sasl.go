package server

import (
	"bytes"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
)

// saslList is SASL_LIST_MECHS (memcached's bin_list_sasl_mechs).
func (c *conn) saslList() {
	if c.s.sasl == nil {
		c.binError(protocol.StatusUnknown)
		return
	}
	// memcached (re)initialises the connection's SASL state here, which
	// also forgets an earlier authentication.
	c.setAuthed(false)
	c.binOKString(0, sasl.Mechanisms())
}

// saslAuth is SASL_AUTH and SASL_STEP (memcached's process_bin_sasl_auth
// and process_bin_complete_sasl_auth).
func (c *conn) saslAuth(op protocol.Opcode, mech, rest []byte, vlen, hk int) (used, need int) {
	if c.s.sasl == nil {
		c.binError(protocol.StatusUnknown)
		c.swallowData(vlen, rest)
		return hk + min(max(vlen, 0), len(rest)), 0
	}
	if vlen < 0 {
		// memcached fails to allocate a negative-sized buffer.
		c.binError(protocol.StatusNoMemory)
		return hk, 0
	}
	if len(mech) > maxSASLMechLen {
		c.binError(protocol.StatusInvalid)
		c.swallowData(vlen, rest)
		return hk + min(max(vlen, 0), len(rest)), 0
	}
	if len(rest) < vlen {
		if !c.roomFor(rest, vlen) {
			c.s.inputNoMemory.Add(1)
			c.binError(protocol.StatusNoMemory)
			c.swallowData(vlen, rest)
			return hk + len(rest), 0
		}
		return 0, hk + vlen
	}
	c.saslStep(op, mech, rest[:vlen])
	return hk + vlen, 0
}

// maxSASLMechLen is memcached's MAX_SASL_MECH_LEN.
const maxSASLMechLen = 32

// saslStep runs one message of an exchange. SASL_AUTH starts a new one
// with the named mechanism (as sasl_server_start does, even mid-exchange);
// SASL_STEP continues the current one and fails without one.
func (c *conn) saslStep(op protocol.Opcode, mech, data []byte) {
	// As in memcached, every SASL message first forgets an earlier
	// authentication: a failed re-authentication leaves the connection
	// unauthenticated.
	c.setAuthed(false)
	if op == protocol.OpSASLAuth {
		srv, err := c.s.sasl.NewServer(string(mech))
		if err != nil {
			c.saslFail()
			return
		}
		c.saslSrv = srv
	} else if c.saslSrv == nil {
		c.saslFail()
		return
	}
	out, done, err := c.saslSrv.Step(data)
	switch {
	case err != nil:
		c.saslSrv = nil
		c.saslFail()
	case done:
		if adm := c.s.adminLogin(); adm != nil && c.saslSrv.User() == adm.User {
			if c.saslSrv.Mechanism() == "PLAIN" && !c.isTLS() {
				// The administrator's password just crossed the
				// network in clear; refuse it, so that no client
				// comes to depend on it (SCRAM never sends it).
				c.saslSrv = nil
				c.saslFail()
				return
			}
			c.setAuthed(true)
			c.admin = true
		} else {
			c.setAuthed(true)
		}
		c.saslSrv = nil
		c.ctr.authCmds.Add(1)
		// memcached answers "Authenticated"; a SCRAM exchange ends with
		// the server's signature (v=...), which Couchbase's clients check.
		if len(out) == 0 {
			c.binOKString(0, "Authenticated")
		} else {
			c.binOK(0, nil, nil, out)
		}
	default:
		c.out = protocol.AppendResponse(c.out, c.bh.Opcode, protocol.StatusAuthContinue, c.bh.Opaque, 0, nil, nil, out)
	}
}

func (c *conn) saslFail() {
	c.ctr.authCmds.Add(1)
	c.ctr.authErrors.Add(1)
	c.binError(protocol.StatusAuthError)
}

// asciiAuth is memcached's try_read_command_asciiauth (-Y): until a text
// connection authenticates, the only accepted command is
// "set <any> <flags> <exptime> <n>" whose n bytes of data are
// "<user> <password>". It returns the bytes consumed, or need > 0 when the
// token has not fully arrived.
func (c *conn) asciiAuth(data []byte) (used, need int) {
	if len(data) < 2 {
		return 0, 0
	}
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		if len(data) > protocol.LineMaxNoNewline {
			c.close = true
		}
		return 0, 0
	}
	// memcached tokenizes the line with its '\r' still on; its number
	// parser stops at the '\r'.
	t := &c.req.Tokens
	protocol.Tokenize(data[:nl], t)
	size, ok := uint32(0), false
	if t.N >= 6 {
		size, ok = protocol.ParseUint32(t.T[4])
	}
	if t.N < 6 || string(t.T[0]) != "set" || !ok {
		c.authReply("CLIENT_ERROR unauthenticated")
		return nl + 1, 0
	}
	n := int(size) + 2
	if len(data)-(nl+1) < n {
		if n > maxGetLine || !c.room(nl+1+n) {
			c.close = true
			return 0, 0
		}
		return 0, nl + 1 + n
	}
	token := data[nl+1 : nl+1+n]
	used = nl + 1 + n
	if token[n-2] != '\r' || token[n-1] != '\n' {
		c.authReply("CLIENT_ERROR bad command line termination")
		return used, 0
	}
	protocol.Tokenize(token[:n-2], t)
	if t.N < 3 {
		c.authReply("CLIENT_ERROR bad authentication token format")
		return used, 0
	}
	c.ctr.authCmds.Add(1)
	if c.s.logins.Load().tokens.Check(string(t.T[0]), string(t.T[1])) {
		c.setAuthed(true)
		c.authReply("STORED")
		return used, 0
	}
	c.ctr.authErrors.Add(1)
	c.authReply("CLIENT_ERROR authentication failure")
	return used, 0
}

// authReply writes an answer of the -Y exchange. memcached reuses one
// response object until the connection authenticates, so within one batch
// of input each answer replaces the previous unsent one.
func (c *conn) authReply(msg string) {
	if c.authMark >= 0 && c.authMark <= len(c.out) {
		c.out = c.out[:c.authMark]
	}
	c.authMark = len(c.out)
	c.out = append(c.out, msg...)
	c.out = append(c.out, '\r', '\n')
}
