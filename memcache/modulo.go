package memcache

import (
	"hash/crc32"
	"net"
	"strconv"
	"sync"
	"time"
)

// ModuloHash names the key hash of a Modulo selector.
type ModuloHash uint8

// The hashes of the modulo distributions. Each names the library whose
// placement it reproduces.
const (
	// HashCRC15 is Cache::Memcached's (Perl) _hashfunc:
	// (crc32(key) >> 16) & 0x7fff. Distribution "modulo".
	HashCRC15 ModuloHash = iota
	// HashCRC15NonZero is HashCRC15 with a zero hash turned into 1, as
	// python-memcached (cmemcache_hash) does; with Rehash it moves keys
	// off a dead server as python-memcached does (see Modulo).
	// Distribution "modulo-python".
	HashCRC15NonZero
	// HashCRC32 is gomemcache's full crc32.ChecksumIEEE(key).
	// Distribution "modulo-crc32".
	HashCRC32
	// HashOAAT is libmemcached's default: Jenkins' one-at-a-time hash over
	// the key's bytes read as C chars (signed on x86, so bytes >= 0x80 are
	// sign-extended), modulo the number of servers, weights ignored.
	// Distribution "modulo-oaat".
	HashOAAT
)

// maxRehashTries is Cache::Memcached's limit: 20 picks per key.
const maxRehashTries = 20

// maxPythonTries is python-memcached's Client._SERVER_RETRIES: 10 picks
// per key.
const maxPythonTries = 10

// Modulo is the classic hash(key) % len(buckets) placement. Buckets are the
// servers expanded by weight (a server of weight 3 appears three times in a
// row, as in Cache::Memcached's init_buckets), except for HashOAAT whose
// library, libmemcached, ignores weights in modula mode.
//
// With Rehash set a server that failed is dead for RetryTimeout, and a key
// whose bucket is dead moves as in Cache::Memcached's get_sock: the hash
// grows by hash(strconv.Itoa(try) + key) for try = 1, 2, … and the bucket
// is picked again, at most 20 picks in all. HashCRC15NonZero moves keys as
// python-memcached's _get_server does instead: the key drops out, the
// hash becomes hash(decimal hash + decimal i) for i = 0, 1, …, at most 10
// picks in all.
type Modulo struct {
	hash    ModuloHash
	buckets []net.Addr
	servers []*moduloServer // distinct servers, in configuration order
	byAddr  map[string]*moduloServer
	rehash  bool
	retry   time.Duration
	now     func() time.Time
}

type moduloServer struct {
	addr net.Addr
	mu   sync.Mutex // protects deadUntil
	// deadUntil is when a dead server may be tried again; zero when alive.
	deadUntil time.Time
}

// NewModulo returns a Modulo selector over servers. opts may be nil.
func NewModulo(hash ModuloHash, servers []Server, opts *Options) (*Modulo, error) {
	if len(servers) == 0 {
		return nil, ErrNoServers
	}
	o := opts.withDefaults()
	m := &Modulo{hash: hash, byAddr: make(map[string]*moduloServer), rehash: o.Rehash, retry: o.RetryTimeout, now: o.Now}
	for _, s := range servers {
		ms := m.byAddr[s.Addr]
		if ms == nil {
			ms = &moduloServer{addr: NewAddr(s.Addr)}
			m.byAddr[s.Addr] = ms
			m.servers = append(m.servers, ms)
		}
		w := s.weight()
		if hash == HashOAAT {
			w = 1
		}
		for i := 0; i < w; i++ {
			m.buckets = append(m.buckets, ms.addr)
		}
	}
	return m, nil
}

// keyHash returns the selector's hash of key.
func (m *Modulo) keyHash(key string) uint32 {
	b := stringBytes(key)
	switch m.hash {
	case HashCRC32:
		return crc32.ChecksumIEEE(b)
	case HashOAAT:
		return oneAtATime(b)
	case HashCRC15NonZero:
		return crc15NonZero(b)
	default:
		return (crc32.ChecksumIEEE(b) >> 16) & 0x7fff
	}
}

// crc15NonZero is python-memcached's cmemcache_hash.
func crc15NonZero(b []byte) uint32 {
	if h := (crc32.ChecksumIEEE(b) >> 16) & 0x7fff; h != 0 {
		return h
	}
	return 1
}

// PickServer returns the server for key.
func (m *Modulo) PickServer(key string) (net.Addr, error) {
	n := uint64(len(m.buckets))
	if m.hash == HashOAAT && len(m.servers) == 1 {
		return m.buckets[0], nil // libmemcached: one server, no hashing
	}
	hv := uint64(m.keyHash(key))
	a := m.buckets[hv%n]
	if !m.rehash || !m.dead(a) {
		return a, nil
	}
	var buf [24 + 250]byte
	if m.hash == HashCRC15NonZero {
		for i := 0; i < maxPythonTries-1; i++ {
			b := strconv.AppendUint(buf[:0], hv, 10)
			b = strconv.AppendInt(b, int64(i), 10)
			hv = uint64(crc15NonZero(b))
			if a = m.buckets[hv%n]; !m.dead(a) {
				return a, nil
			}
		}
		return nil, ErrNoServers
	}
	for try := 1; try < maxRehashTries; try++ {
		b := strconv.AppendInt(buf[:0], int64(try), 10)
		b = append(b, key...)
		hv += uint64((crc32.ChecksumIEEE(b) >> 16) & 0x7fff)
		if a = m.buckets[hv%n]; !m.dead(a) {
			return a, nil
		}
	}
	return nil, ErrNoServers
}

// dead reports whether a is dead now; a server whose time is up is alive
// again (Cache::Memcached forgets a dead host the same way).
func (m *Modulo) dead(a net.Addr) bool {
	s := m.byAddr[a.String()]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deadUntil.IsZero() {
		return false
	}
	if !m.now().Before(s.deadUntil) {
		s.deadUntil = time.Time{}
		return false
	}
	return true
}

// Each calls f for every distinct server.
func (m *Modulo) Each(f func(net.Addr) error) error {
	for _, s := range m.servers {
		if err := f(s.addr); err != nil {
			return err
		}
	}
	return nil
}

// MarkDead marks the server at addr dead for the retry timeout, as a
// failed connection does when Rehash is on. It reports whether addr is one
// of the selector's servers.
func (m *Modulo) MarkDead(addr string) bool {
	s := m.byAddr[addr]
	if s == nil {
		return false
	}
	s.mu.Lock()
	s.deadUntil = m.now().Add(m.retry)
	s.mu.Unlock()
	return true
}

func (m *Modulo) serverFailed(addr net.Addr) {
	if m.rehash {
		m.MarkDead(addr.String())
	}
}

func (m *Modulo) serverOK(net.Addr) {}

// oneAtATime is libhashkit's hashkit_one_at_a_time. The C code reads each
// byte through a (signed) char and widens it to uint32, so bytes >= 0x80
// contribute 0xffffff00|b; int8 conversion reproduces that.
func oneAtATime(key []byte) uint32 {
	var v uint32
	for _, c := range key {
		v += uint32(int32(int8(c)))
		v += v << 10
		v ^= v >> 6
	}
	v += v << 3
	v ^= v >> 11
	v += v << 15
	return v
}
