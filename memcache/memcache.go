package memcache

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

var (
	// ErrCacheMiss means that a Get failed because the item wasn't present.
	ErrCacheMiss = errors.New("memcache: cache miss")

	// ErrCASConflict means that a CompareAndSwap call failed due to the
	// cached value being modified between the Get and the CompareAndSwap.
	// If the cached value was simply evicted rather than replaced,
	// ErrNotStored will be returned instead.
	ErrCASConflict = errors.New("memcache: compare-and-swap conflict")

	// ErrNotStored means that a conditional write operation (i.e. Add or
	// CompareAndSwap) failed because the condition was not satisfied.
	ErrNotStored = errors.New("memcache: item not stored")

	// ErrServerError means that a server error occurred. Errors that carry
	// the server's message wrap it: test with errors.Is.
	ErrServerError = errors.New("memcache: server error")

	// ErrNoStats means that no statistics were available.
	ErrNoStats = errors.New("memcache: no statistics available")

	// ErrMalformedKey is returned when an invalid key is used. Keys must be
	// at maximum 250 bytes long and not contain whitespace or control
	// characters.
	ErrMalformedKey = errors.New("memcache: key is too long or contains invalid characters")

	// ErrNoServers is returned when no servers are configured or available.
	ErrNoServers = errors.New("memcache: no servers configured or available")

	// ErrNotMyVBucket means a server answered NOT_MY_VBUCKET (binary status
	// 0x07): it does not own the key's vbucket. A cluster client (NewCluster)
	// learns the new map and retries; it returns an error wrapping
	// ErrNotMyVBucket only when its tries are used up.
	ErrNotMyVBucket = errors.New("memcache: not my vbucket")

	// errNotMyVBucketAnswer is one server's NOT_MY_VBUCKET answer.
	errNotMyVBucketAnswer = &serverError{msg: "server answered NOT_MY_VBUCKET", wraps: ErrNotMyVBucket}

	// errClosed fails the requests of a connection that Close shut down.
	errClosed = errors.New("memcache: client closed")
)

const (
	// DefaultTimeout is the default socket read/write timeout, and the
	// dial timeout.
	DefaultTimeout = 500 * time.Millisecond

	// DefaultMaxIdleConns is gomemcache's default idle pool size. Here it
	// is the default number of connections per server (MaxConns).
	DefaultMaxIdleConns = 2
)

// Protocol selects the wire protocol a Client speaks.
type Protocol uint8

const (
	// Text is memcached's classic text protocol (the default).
	Text Protocol = iota
	// Binary is memcached's binary protocol.
	Binary
)

// Item is an item to be got or stored in a memcached server.
type Item struct {
	// Key is the Item's key (250 bytes maximum).
	Key string

	// Value is the Item's value. Items returned by GetMulti share one
	// buffer per server; each Value's capacity is its length, so
	// appending to one never overwrites another.
	Value []byte

	// Flags are server-opaque flags whose semantics are entirely
	// up to the app.
	Flags uint32

	// Expiration is the cache expiration time, in seconds: either a relative
	// time from now (up to 1 month), or an absolute Unix epoch time.
	// Zero means the Item has no expiration time.
	Expiration int32

	// CasID is the compare and swap ID.
	//
	// It's populated by get requests and then the same value is
	// required for a CompareAndSwap request to succeed. Stores leave it
	// as it is (StoreContext returns a store's new CAS).
	CasID uint64
}

// ConnectTimeoutError is the error type used when it takes too long to
// connect to the desired host. This level of detail can generally be
// ignored.
type ConnectTimeoutError struct {
	Addr net.Addr
}

func (cte *ConnectTimeoutError) Error() string {
	return "memcache: connect timeout to " + cte.Addr.String()
}

// Client is a memcache client. It is safe for unlocked use by multiple
// concurrent goroutines. Set its fields before its first use.
type Client struct {
	// DialContext connects to the address on the named network using the
	// provided context. To use TLS, give a tls.Dialer's DialContext.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)

	// Timeout specifies the dial timeout, the socket write timeout, and
	// how long a request may wait for its whole answer from the moment it
	// is sent, however slowly the server sends it (gomemcache's
	// per-request deadline). A request that passes it fails with a
	// timeout, and so does its connection with every request queued on
	// it. If zero, DefaultTimeout is used.
	Timeout time.Duration

	// MaxConns is the most connections the client opens to one server.
	// Requests are pipelined, so a few connections carry any load. If
	// zero, MaxIdleConns is used, and if that is zero too,
	// DefaultMaxIdleConns.
	MaxConns int

	// MaxIdleConns is accepted for compatibility with gomemcache; see
	// MaxConns.
	MaxIdleConns int

	// Protocol is the wire protocol: Text (default) or Binary.
	Protocol Protocol

	selector ServerSelector
	health   healthReporter // selector, if it wants failure reports
	cl       *cluster       // NewCluster's state; nil for other clients

	mu    sync.RWMutex // protects pools
	pools map[string]*pool

	testReadHook func(*conn) // tests only: each new conn's readHook
}

// New returns a memcache client using the provided server(s) with equal
// weight and gomemcache's placement (modulo-crc32). If a server is listed
// multiple times, it gets a proportional amount of weight.
func New(server ...string) *Client {
	ss := new(ServerList)
	ss.SetServers(server...)
	return NewFromSelector(ss)
}

// NewFromSelector returns a new Client using the provided ServerSelector.
func NewFromSelector(ss ServerSelector) *Client {
	c := &Client{selector: ss, pools: make(map[string]*pool)}
	c.health, _ = ss.(healthReporter)
	return c
}

func (c *Client) netTimeout() time.Duration {
	if c.Timeout != 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

func (c *Client) maxConns() int {
	switch {
	case c.MaxConns > 0:
		return c.MaxConns
	case c.MaxIdleConns > 0:
		return c.MaxIdleConns
	}
	return DefaultMaxIdleConns
}

// LegalKey reports whether key can go on the wire: at most 250 bytes, no
// spaces or control characters (bytes >= 0x80, as in UTF-8, are fine).
// The client refuses other keys with ErrMalformedKey.
func LegalKey[K string | []byte](key K) bool {
	if len(key) > 250 || len(key) == 0 {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] == 0x7f {
			return false
		}
	}
	return true
}

// resumable reports whether err is an answer from the server (the
// connection stays usable) rather than a failure.
func resumable(err error) bool {
	switch err {
	case nil, ErrCacheMiss, ErrCASConflict, ErrNotStored, ErrMalformedKey:
		return true
	}
	var se *serverError
	return errors.As(err, &se)
}

// serverError is an error line from the server (SERVER_ERROR, CLIENT_ERROR,
// ERROR, or a binary status): an answer, the connection stays usable.
type serverError struct {
	msg      string
	isServer bool  // SERVER_ERROR (wraps ErrServerError)
	wraps    error // else the error it wraps, if any
}

func (e *serverError) Error() string { return "memcache: " + e.msg }

func (e *serverError) Unwrap() error {
	if e.isServer {
		return ErrServerError
	}
	return e.wraps
}
