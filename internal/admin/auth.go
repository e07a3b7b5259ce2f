package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
)

// Credentials are how a cluster's own processes (the manager, a node's
// streams and lease queries to its peers, ctl) log in to a node's control
// plane: as the cluster administrator over SASL SCRAM (User and Password,
// the one entry of the file `vbcache ctl init-security` writes as
// admin.pwdb), inside TLS when TLS is set. A nil or zero Credentials dials
// plain TCP and logs in as nobody, which only a node started with
// --insecure-cluster serves control requests from.
type Credentials struct {
	User, Password string
	// Previous is the password before Password while a rotation is under
	// way: a node still accepts it from others, but logs in with Password.
	Previous string
	TLS      *tls.Config // nil: no TLS
	// Term is given to the connections DialWith opens (Conn.Term): a
	// manager's requests carry its leadership's term.
	Term uint64
}

// LoadCredentials reads a password file holding the administrator's one
// entry (memcached's MEMCACHED_SASL_PWDB format, "user:password"), or two
// for the same user during a rotation: the first is Password, the second
// Previous (see sasl.Passwords).
func LoadCredentials(path string) (*Credentials, error) {
	m, err := sasl.LoadPasswordFile(path)
	if err != nil {
		return nil, err
	}
	if m.Len() != 1 {
		return nil, fmt.Errorf("%s: %d users: a cluster's admin credential file holds one", path, m.Len())
	}
	for u, p := range m.Current {
		return &Credentials{User: u, Password: p, Previous: m.Previous[u]}, nil
	}
	panic("unreachable")
}

// Accepts reports whether user and password log in as cr: its Password or,
// during a rotation, its Previous one. The comparison takes the same time
// whichever part differs.
func (cr *Credentials) Accepts(user, password string) bool {
	if cr == nil || cr.User == "" {
		return false
	}
	got := sha256.Sum256([]byte(password))
	want := sha256.Sum256([]byte(cr.Password))
	ok := subtle.ConstantTimeCompare(got[:], want[:]) == 1
	if cr.Previous != "" {
		want = sha256.Sum256([]byte(cr.Previous))
		ok = subtle.ConstantTimeCompare(got[:], want[:]) == 1 || ok
	}
	return ok && user == cr.User
}

// DialWith connects to a node and logs in with cr.
func DialWith(ctx context.Context, addr string, cr *Credentials) (*Conn, error) {
	nc, err := cr.DialNet(ctx, addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	c := NewConn(nc, addr)
	if cr != nil {
		c.Term = cr.Term
	}
	return c, nil
}

// DialNet opens a connection to addr, with TLS when cr has it, and logs in
// as cr.User when it has one; timeout bounds each of the three steps. The
// stream consumer uses it for the connections it then speaks its own
// requests on.
func (cr *Credentials) DialNet(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || cr == nil {
		return nc, err
	}
	if cr.TLS != nil {
		cfg := cr.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tc := tls.Client(nc, cfg)
		hctx, cancel := context.WithTimeout(ctx, timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("tls to %s: %w", addr, err)
		}
		nc = tc
	}
	if cr.User != "" {
		dl := time.Now().Add(timeout)
		if d, ok := ctx.Deadline(); ok && d.Before(dl) {
			dl = d
		}
		// The login heeds ctx too: a node that accepts the connection
		// and never answers (a paused process: its kernel accepts)
		// would otherwise hold a cancelled caller for the whole timeout.
		stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
		err := login(nc, cr.User, cr.Password, dl)
		if !stop() && err != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("log in to %s as %s: %w", addr, cr.User, err)
		}
		nc.SetDeadline(time.Time{})
	}
	return nc, nil
}

// ErrAuth is wrapped by Login's error when the node refused the
// credentials (status 0x20).
var ErrAuth = errors.New("authentication refused")

// Login runs a SCRAM-SHA256 exchange (SASL_AUTH, SASL_STEP) on nc and
// checks the node's signature: a node that does not know the password
// cannot pass for one that does.
func Login(nc net.Conn, user, password string) error {
	return login(nc, user, password, time.Now().Add(10*time.Second))
}

func login(nc net.Conn, user, password string, deadline time.Time) error {
	cl, err := sasl.NewClient(sasl.ClientMechanism, user, password)
	if err != nil {
		return err
	}
	c := NewConn(nc, nc.RemoteAddr().String())
	c.Timeout = max(time.Until(deadline), time.Millisecond)
	out, err := c.Do(protocol.OpSASLAuth, 0, nil, []byte(cl.Mechanism()), cl.First())
	if !IsStatus(err, protocol.StatusAuthContinue) {
		if err == nil {
			return errors.New("the node ended the exchange after client-first")
		}
		if IsStatus(err, protocol.StatusAuthError) {
			return fmt.Errorf("%w: %v", ErrAuth, err)
		}
		if IsStatus(err, protocol.StatusUnknown) {
			return fmt.Errorf("%w (the node takes no SASL login: is it running without --cluster-auth?)", err)
		}
		return err
	}
	final, err := cl.Final(out)
	if err != nil {
		return err
	}
	out, err = c.Do(protocol.OpSASLStep, 0, nil, []byte(cl.Mechanism()), final)
	if err != nil {
		if IsStatus(err, protocol.StatusAuthError) {
			return fmt.Errorf("%w: %v", ErrAuth, err)
		}
		return err
	}
	if c.r.Buffered() != 0 {
		return errors.New("the node sent more than its answer during login")
	}
	return cl.Verify(out)
}
