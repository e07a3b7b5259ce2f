package server

import (
	"github.com/vbcache/vbcache/internal/protocol"
)

// saslList is SASL_LIST_MECHS (memcached's bin_list_sasl_mechs).
func (c *conn) saslList() {
	if !c.s.cfg.SASL {
		c.binError(protocol.StatusUnknown)
		return
	}
	c.binOKString(0, saslMechanisms())
}

// saslAuth is SASL_AUTH and SASL_STEP (memcached's process_bin_sasl_auth
// and process_bin_complete_sasl_auth).
func (c *conn) saslAuth(op protocol.Opcode, mech, rest []byte, vlen, hk int) (used, need int) {
	if !c.s.cfg.SASL {
		c.binError(protocol.StatusUnknown)
		c.swallowData(vlen, rest)
		return hk + min(vlen, len(rest)), 0
	}
	if len(rest) < vlen {
		return 0, hk + vlen
	}
	c.saslStep(op, mech, rest[:vlen])
	return hk + vlen, 0
}

// TEMPORARY until internal/sasl lands: no mechanism is offered and every
// exchange fails.
func saslMechanisms() string { return "" }

func (c *conn) saslStep(op protocol.Opcode, mech, data []byte) {
	c.ctr.authCmds.Add(1)
	c.ctr.authErrors.Add(1)
	c.binError(protocol.StatusAuthError)
}
