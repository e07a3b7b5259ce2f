package memcache

import (
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// ServerSelector is the interface that selects a memcache server as a
// function of the item's key. It is gomemcache's interface, so selectors
// written for gomemcache work here and ours work there.
//
// All ServerSelector implementations must be safe for concurrent use by
// multiple goroutines.
type ServerSelector interface {
	// PickServer returns the server address that a given item
	// should be shared onto.
	PickServer(key string) (net.Addr, error)
	// Each calls f for every server, stopping at the first error.
	Each(f func(net.Addr) error) error
}

// healthReporter is implemented by selectors that react to failing servers
// (Modulo with Rehash, Ketama with AutoEject). The Client tells them when
// a connection to a server failed (dial error, I/O error, timeout) and
// when a request to it succeeded.
type healthReporter interface {
	serverFailed(addr net.Addr)
	serverOK(addr net.Addr)
}

// Server is one entry of a server list: an address as the user wrote it
// ("host:port", or a unix socket path containing "/") and a weight.
type Server struct {
	Addr   string
	Weight int // relative weight; zero means 1
}

// weight returns the server's weight with the zero value meaning 1.
func (s Server) weight() int {
	if s.Weight <= 0 {
		return 1
	}
	return s.Weight
}

// hostPort splits Addr into host and port. A unix socket path has port 0.
func (s Server) hostPort() (host string, port int) {
	if strings.Contains(s.Addr, "/") {
		return s.Addr, 0
	}
	h, p, err := net.SplitHostPort(s.Addr)
	if err != nil {
		return s.Addr, 11211
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

// ParseServers parses a comma-separated server list in the form
// "host:port[:weight],…" ("[v6addr]:port[:weight]" for IPv6; a path with a
// "/" is a unix socket, "path[:weight]"). A missing port means 11211.
func ParseServers(list string) ([]Server, error) {
	var out []Server
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		s, err := parseServer(f)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, ErrNoServers
	}
	return out, nil
}

func parseServer(f string) (Server, error) {
	if strings.Contains(f, "/") {
		// twemproxy writes a unix socket's weight after its path:
		// "/run/memcached.sock:1".
		if i := strings.LastIndexByte(f, ':'); i > strings.LastIndexByte(f, '/') {
			if w, err := strconv.Atoi(f[i+1:]); err == nil && w > 0 {
				return Server{Addr: f[:i], Weight: w}, nil
			}
		}
		return Server{Addr: f, Weight: 1}, nil
	}
	if _, _, err := net.SplitHostPort(f); err == nil {
		return Server{Addr: f, Weight: 1}, nil
	}
	i := strings.LastIndexByte(f, ':')
	if i > 0 {
		w, werr := strconv.Atoi(f[i+1:])
		if _, _, err := net.SplitHostPort(f[:i]); err == nil && werr == nil && w > 0 {
			return Server{Addr: f[:i], Weight: w}, nil
		}
	}
	if !strings.Contains(f, ":") || (strings.HasPrefix(f, "[") && strings.HasSuffix(f, "]")) {
		return Server{Addr: net.JoinHostPort(strings.Trim(f, "[]"), "11211"), Weight: 1}, nil
	}
	return Server{}, fmt.Errorf("memcache: bad server %q (want host:port[:weight])", f)
}

// Addr is the net.Addr selectors return: the server's address exactly as it
// was configured, so that a host name is dialed (and hashed) as a name.
type Addr struct {
	network, str string
}

// NewAddr returns the Addr for a configured server address: network "unix"
// if it contains "/", else "tcp".
func NewAddr(addr string) *Addr {
	if strings.Contains(addr, "/") {
		return &Addr{"unix", addr}
	}
	return &Addr{"tcp", addr}
}

// Network returns "tcp" or "unix".
func (a *Addr) Network() string { return a.network }

// String returns the address as configured.
func (a *Addr) String() string { return a.str }

// ServerList is gomemcache's selector: crc32.ChecksumIEEE(key) % n over the
// servers (the full 32-bit CRC), a single server short-circuits, and a
// server listed k times gets k times the keys. Its zero value is usable.
// This is the "modulo-crc32" distribution.
type ServerList struct {
	mu    sync.RWMutex // protects addrs
	addrs []net.Addr
}

// SetServers changes a ServerList's set of servers at runtime and is safe
// for concurrent use by multiple goroutines. Like gomemcache it resolves
// TCP addresses now and returns an error, changing nothing, if one fails
// to resolve.
func (ss *ServerList) SetServers(servers ...string) error {
	naddr := make([]net.Addr, len(servers))
	for i, s := range servers {
		if strings.Contains(s, "/") {
			a, err := net.ResolveUnixAddr("unix", s)
			if err != nil {
				return err
			}
			naddr[i] = &Addr{"unix", a.String()}
			continue
		}
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			return err
		}
		naddr[i] = &Addr{"tcp", a.String()}
	}
	ss.mu.Lock()
	ss.addrs = naddr
	ss.mu.Unlock()
	return nil
}

// Each calls f for every server in the list.
func (ss *ServerList) Each(f func(net.Addr) error) error {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	return eachUnique(ss.addrs, f)
}

// PickServer returns the server for key.
func (ss *ServerList) PickServer(key string) (net.Addr, error) {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	switch len(ss.addrs) {
	case 0:
		return nil, ErrNoServers
	case 1:
		return ss.addrs[0], nil
	}
	return ss.addrs[crc32.ChecksumIEEE(stringBytes(key))%uint32(len(ss.addrs))], nil
}

// eachUnique calls f once per distinct address (weight-expanded lists name
// a server several times).
func eachUnique(addrs []net.Addr, f func(net.Addr) error) error {
	seen := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		if seen[a.String()] {
			continue
		}
		seen[a.String()] = true
		if err := f(a); err != nil {
			return err
		}
	}
	return nil
}

// stringBytes views s as bytes without copying; the hashes only read it.
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// errUnknownDistribution is returned by NewSelector for a name it does not
// know.
var errUnknownDistribution = errors.New("memcache: unknown distribution")
