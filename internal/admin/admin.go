// Package admin is a client for a cluster-mode node's control requests
// over the binary protocol: vbucket states (SET/GET/DEL_VBUCKET), the
// cluster config (SET/GET_CLUSTER_CONFIG), the stream controls (TAKEOVER,
// REPLICATE, STOP_REPLICATION) and stats. `vbcache ctl`, the tests and the
// manager use it. One Conn is one connection, used by one goroutine at a
// time.
//
// A cluster node serves these requests only to the cluster administrator
// (its --cluster-auth), unless it runs with --insecure-cluster. The caller
// holds the administrator as [Credentials] (LoadCredentials reads the
// --cluster-auth file) and dials with [DialWith] or [Credentials.DialNet]:
// TLS first when Credentials.TLS is set, then a SCRAM-SHA-256 login whose
// server signature is checked, so a node that does not know the password
// cannot pass for one that does. Nil Credentials dial a plain connection.
package admin

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/stream"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// Conn is a control connection to one node.
type Conn struct {
	Addr    string
	nc      net.Conn
	r       *bufio.Reader
	opaque  uint32
	Timeout time.Duration // per request (default 10 s; TAKEOVER uses MoveTimeout)
	// MoveTimeout bounds a TAKEOVER (default 10 minutes).
	MoveTimeout time.Duration
	// Term is the leader's term, sent with every request that changes a
	// node's vbuckets, map or replication (SET_VBUCKET, DEL_VBUCKET,
	// TAKEOVER, REPLICATE, STOP_REPLICATION, SET_CLUSTER_CONFIG) in the
	// request header's CAS field, which those requests do not use
	// otherwise: a node refuses a term older than the newest it has seen
	// (internal/server, terms.go). 0, an operator's request, is never
	// refused. A lease grant carries the term as its epoch.
	Term uint64
}

// StatusError is a node's non-OK answer.
type StatusError struct {
	Op     protocol.Opcode
	Status protocol.Status
	Body   string
}

func (e *StatusError) Error() string {
	if e.Body != "" {
		return fmt.Sprintf("opcode %#x: status %#x: %s", uint8(e.Op), uint16(e.Status), e.Body)
	}
	return fmt.Sprintf("opcode %#x: status %#x", uint8(e.Op), uint16(e.Status))
}

// IsStatus reports whether err is a node's answer with status st.
func IsStatus(err error, st protocol.Status) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == st
}

// Refused reports whether err says that nothing listens at the address
// (connection refused): on one machine, the node's process is gone.
func Refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// Dial connects to a node.
func Dial(ctx context.Context, addr string) (*Conn, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return NewConn(nc, addr), nil
}

// NewConn wraps a connection to the node at addr that the caller opened
// (through a proxy, another network namespace); Close closes it.
func NewConn(nc net.Conn, addr string) *Conn {
	return &Conn{Addr: addr, nc: nc, r: bufio.NewReader(nc), Timeout: 10 * time.Second, MoveTimeout: 10 * time.Minute}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// Idle reports whether the connection, between requests, is still open
// with nothing unread: a pool checks it before it reuses a connection, so
// that one the node closed meanwhile (it restarted, or dropped idle
// connections) costs a dial rather than a failed request. It peeks at the
// socket without blocking (recv with MSG_PEEK|MSG_DONTWAIT): an end of
// stream, an error or bytes nobody asked for all mean the connection is
// not fit to use. A connection whose socket it cannot reach (not TCP or
// TLS over TCP) counts as idle.
func (c *Conn) Idle() bool {
	if c.r.Buffered() > 0 {
		return false
	}
	nc := c.nc
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	// A deadline in the past would make the read fail before it peeks.
	if err := nc.SetReadDeadline(time.Time{}); err != nil {
		return false
	}
	idle := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, e := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		idle = e == syscall.EAGAIN || e == syscall.EWOULDBLOCK
		return true // never wait: this is a look, not a read
	})
	return err == nil && idle
}

// Do sends one request and returns the response's value (extras and key
// stripped), or a *StatusError for a non-OK status.
func (c *Conn) Do(op protocol.Opcode, vb uint16, extras, key, value []byte) ([]byte, error) {
	return c.do(c.Timeout, op, vb, 0, extras, key, value)
}

// doTerm is Do for a request that carries the term (Conn.Term).
func (c *Conn) doTerm(timeout time.Duration, op protocol.Opcode, vb uint16, extras, key, value []byte) ([]byte, error) {
	return c.do(timeout, op, vb, c.Term, extras, key, value)
}

func (c *Conn) do(timeout time.Duration, op protocol.Opcode, vb uint16, cas uint64, extras, key, value []byte) ([]byte, error) {
	c.opaque++
	req := protocol.AppendRequest(nil, &protocol.Request{
		Header: protocol.Header{Opcode: op, VBucket: vb, Opaque: c.opaque, CAS: cas},
		Extras: extras, Key: key, Value: value,
	})
	c.nc.SetDeadline(time.Now().Add(timeout))
	if _, err := c.nc.Write(req); err != nil {
		return nil, err
	}
	for {
		h, body, err := c.read()
		if err != nil {
			return nil, err
		}
		if h.Opaque != c.opaque || h.Opcode != op {
			continue // a late answer to an earlier request
		}
		val := body[int(h.ExtLen)+int(h.KeyLen):]
		if h.Status != protocol.StatusOK {
			return val, &StatusError{Op: op, Status: h.Status, Body: string(val)}
		}
		return val, nil
	}
}

func (c *Conn) read() (protocol.Header, []byte, error) {
	var hb [protocol.HeaderLen]byte
	var h protocol.Header
	if _, err := io.ReadFull(c.r, hb[:]); err != nil {
		return h, nil, err
	}
	protocol.ParseHeader(hb[:], &h)
	if h.Magic != protocol.MagicResponse {
		return h, nil, fmt.Errorf("admin: bad magic %#x from %s", h.Magic, c.Addr)
	}
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return h, nil, err
	}
	if int(h.ExtLen)+int(h.KeyLen) > len(body) {
		return h, nil, fmt.Errorf("admin: bad lengths from %s", c.Addr)
	}
	return h, body, nil
}

// SetVBucket sets vb's state.
func (c *Conn) SetVBucket(vb int, st vbucket.State) error {
	_, err := c.doTerm(c.Timeout, protocol.OpSetVBucket, uint16(vb), []byte{byte(st)}, nil, nil)
	return err
}

// GetVBucket returns vb's state.
func (c *Conn) GetVBucket(vb int) (vbucket.State, error) {
	v, err := c.Do(protocol.OpGetVBucket, uint16(vb), nil, nil, nil)
	if err != nil {
		return 0, err
	}
	if len(v) != 4 {
		return 0, fmt.Errorf("admin: GET_VBUCKET answered %d bytes", len(v))
	}
	return vbucket.State(binary.BigEndian.Uint32(v)), nil
}

// DelVBucket makes vb dead and drops its items.
func (c *Conn) DelVBucket(vb int) error {
	_, err := c.doTerm(c.Timeout, protocol.OpDelVBucket, uint16(vb), nil, nil, nil)
	return err
}

// Takeover asks this node to move vb here from src and waits for the end
// of the move.
func (c *Conn) Takeover(vb int, src string) error {
	_, err := c.doTerm(c.MoveTimeout, stream.OpTakeover, uint16(vb), nil, []byte(src), nil)
	return err
}

// Replicate makes vb a replica here fed from src.
func (c *Conn) Replicate(vb int, src string) error {
	_, err := c.doTerm(c.Timeout, stream.OpReplicate, uint16(vb), nil, []byte(src), nil)
	return err
}

// StopReplication stops feeding vb here.
func (c *Conn) StopReplication(vb int) error {
	_, err := c.doTerm(c.Timeout, stream.OpStopReplication, uint16(vb), nil, nil, nil)
	return err
}

// ClusterConfig returns the node's cluster config JSON (empty: none).
func (c *Conn) ClusterConfig() ([]byte, error) {
	return c.Do(protocol.OpGetClusterConfig, 0, nil, nil, nil)
}

// SetClusterConfig stores a config with its (epoch, rev) in the extras.
// A node that holds a config at least as new answers KEY_EEXISTS
// (IsStatus(err, protocol.StatusKeyExists)).
func (c *Conn) SetClusterConfig(json []byte, epoch, rev int64) error {
	ex := make([]byte, 16)
	binary.BigEndian.PutUint64(ex[0:], uint64(epoch))
	binary.BigEndian.PutUint64(ex[8:], uint64(rev))
	_, err := c.doTerm(c.Timeout, protocol.OpSetClusterConfig, 0, ex, []byte("default"), json)
	return err
}

// LeaseAnswer is a node's answer to a lease grant.
type LeaseAnswer struct {
	// Known: the node said what follows. An older node answers with no
	// value; then both are zero.
	Known bool
	// Incarnation is random, nonzero and chosen at the node's start: a
	// node restarted at the same address answers with another.
	Incarnation uint64
	// Held counts the vbuckets the node holds as active, replica or
	// pending.
	Held int
	// Actives counts those it holds as active; ActivesKnown says the
	// node said (a node before it answers 12 bytes).
	Actives      int
	ActivesKnown bool
}

// Lease grants the node a lease of d to serve its active vbuckets, as
// grant seq of the leadership epoch; acked is the latest grant of the
// epoch whose answer came back (0: none), which the lease runs from.
// self is the node's address as the manager names it and quorum the
// members whose majority may extend it (internal/server, lease.go). It
// returns what the node answered: its incarnation, the number of
// vbuckets it holds and the number it holds active (bytes 0-7, 8-11 and
// 12-15 of the value; an older node stops at 12; bytes past 16, which a
// later node may add, are ignored).
func (c *Conn) Lease(d time.Duration, epoch, seq, acked uint64, self string, quorum []string) (LeaseAnswer, error) {
	ex := make([]byte, 28)
	binary.BigEndian.PutUint32(ex, uint32(d/time.Millisecond))
	binary.BigEndian.PutUint64(ex[4:], epoch)
	binary.BigEndian.PutUint64(ex[12:], seq)
	binary.BigEndian.PutUint64(ex[20:], acked)
	v, err := c.Do(protocol.OpLease, 0, ex, []byte(self), []byte(strings.Join(quorum, ",")))
	switch {
	case err != nil:
		return LeaseAnswer{}, err
	case len(v) == 0:
		return LeaseAnswer{}, nil // an older node: nothing known
	case len(v) < 12:
		return LeaseAnswer{}, fmt.Errorf("LEASE: %d-byte answer", len(v))
	}
	a := LeaseAnswer{Known: true, Incarnation: binary.BigEndian.Uint64(v[0:8]), Held: int(binary.BigEndian.Uint32(v[8:12]))}
	if len(v) >= 16 {
		a.Actives, a.ActivesKnown = int(binary.BigEndian.Uint32(v[12:16])), true
	}
	return a, nil
}

// LeaseInfo is a node's answer to LEASE_QUERY.
type LeaseInfo struct {
	ManagerLeft   time.Duration // left on its manager's lease (0: none)
	RevEpoch, Rev int64         // its map's
}

// LeaseQuery asks the node whether it holds a manager's lease.
func (c *Conn) LeaseQuery() (LeaseInfo, error) {
	v, err := c.Do(protocol.OpLeaseQuery, 0, nil, nil, nil)
	if err != nil {
		return LeaseInfo{}, err
	}
	if len(v) < 20 { // 24 from a node that sends its lease's duration
		return LeaseInfo{}, fmt.Errorf("LEASE_QUERY: %d-byte answer", len(v))
	}
	return LeaseInfo{ManagerLeft: time.Duration(binary.BigEndian.Uint32(v[0:4])) * time.Millisecond,
		RevEpoch: int64(binary.BigEndian.Uint64(v[4:12])), Rev: int64(binary.BigEndian.Uint64(v[12:20]))}, nil
}

// Stats returns a stats group ("" for the general stats) in order.
func (c *Conn) Stats(group string) ([][2]string, error) {
	c.opaque++
	req := protocol.AppendRequest(nil, &protocol.Request{
		Header: protocol.Header{Opcode: protocol.OpStat, Opaque: c.opaque}, Key: []byte(group),
	})
	c.nc.SetDeadline(time.Now().Add(c.Timeout))
	if _, err := c.nc.Write(req); err != nil {
		return nil, err
	}
	var out [][2]string
	for {
		h, body, err := c.read()
		if err != nil {
			return nil, err
		}
		if h.Opaque != c.opaque {
			continue
		}
		if h.Status != protocol.StatusOK {
			return nil, &StatusError{Op: protocol.OpStat, Status: h.Status, Body: string(body)}
		}
		if h.KeyLen == 0 {
			return out, nil
		}
		k := body[h.ExtLen : int(h.ExtLen)+int(h.KeyLen)]
		out = append(out, [2]string{string(k), string(body[int(h.ExtLen)+int(h.KeyLen):])})
	}
}
