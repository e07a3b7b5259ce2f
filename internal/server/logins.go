package server

import (
	"errors"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/sasl"
)

// logins are who may log in to the node: -S's SASL users, -Y's text
// tokens and --cluster-auth's administrator. The server keeps one value in
// an atomic pointer and replaces it whole (SetLogins), so an exchange reads
// a consistent set without a lock. A connection that logged in keeps its
// login and role across a replacement, as memcached never logs anyone out:
// open streams and control connections survive a rotation.
type logins struct {
	pwdb   *sasl.Passwords    // -S; nil without it
	tokens *sasl.Passwords    // -Y; nil without it
	admin  *admin.Credentials // --cluster-auth; nil without it (or on a plain node)
}

// saslLookup is the SASL credential lookup: the administrator's password
// (or, with previous, the one before it during a rotation), then -S's users.
func (s *Server) saslLookup(previous bool) func(string) (string, bool) {
	return func(u string) (string, bool) {
		l := s.logins.Load()
		if adm := l.admin; adm != nil && u == adm.User {
			if previous {
				return adm.Previous, adm.Previous != ""
			}
			return adm.Password, true
		}
		if !s.cfg.SASL {
			return "", false
		}
		if previous {
			return l.pwdb.PreviousOf(u)
		}
		return l.pwdb.Lookup(u)
	}
}

// adminLogin is the cluster administrator the node knows now, or nil.
func (s *Server) adminLogin() *admin.Credentials { return s.logins.Load().admin }

// ErrLoginsChanged is SetLogins refusing to switch a kind of login on or
// off: that changes what the node's connections must do before their first
// request, which only a restart may.
var ErrLoginsChanged = errors.New("server: a reload cannot add or remove -S, -Y or --cluster-auth")

// SetLogins replaces the node's credentials with those just re-read from
// the files it started with (SIGHUP): new logins use them, connections
// already logged in stay so. Each argument must be nil exactly when the
// node started without that kind of login.
func (s *Server) SetLogins(pwdb, tokens *sasl.Passwords, adm *admin.Credentials) error {
	old := s.logins.Load()
	if (pwdb == nil) != (old.pwdb == nil) || (tokens == nil) != (old.tokens == nil) || (adm == nil) != (old.admin == nil) {
		return ErrLoginsChanged
	}
	if adm != nil {
		c := *adm
		c.TLS = nil // peerCredentials adds Config.PeerTLS
		adm = &c
	}
	s.logins.Store(&logins{pwdb: pwdb, tokens: tokens, admin: adm})
	return nil
}
