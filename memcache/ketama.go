package memcache

import (
	"crypto/md5"
	"encoding/binary"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// KetamaFormat names how a server's points are labelled before hashing;
// it is what differs between the ketama implementations.
type KetamaFormat uint8

const (
	// KetamaLibmemcached labels points "host-N" when the port is 11211 and
	// "host:port-N" otherwise, with host as configured (a name is hashed
	// as a name). libmemcached's weighted ketama (hosts.cc
	// update_continuum), twemproxy. Among points with the same value the
	// first server wins.
	KetamaLibmemcached KetamaFormat = iota
	// KetamaSpy labels points as spymemcached's KetamaNodeLocator does
	// with its default KetamaNodeKeyFormatter format, SPYMEMCACHED: the
	// string form of the node's InetSocketAddress without a leading "/",
	// then "-N". That is "ip:port-N" for an IPv4 address (port 11211
	// included), "[a:b:0:0:0:0:0:1]:port-N" for IPv6 (Java 14 and later:
	// brackets, eight uncompressed groups), and "name/ip:port-N" for a host
	// name, with ip the name's address when the Java client started (the
	// first IPv4 one, as Java prefers). NewKetama therefore resolves host
	// names (Options.LookupHost); a name that does not resolve gets Java's
	// "name/<unresolved>:port". Checked against spymemcached 2.12.3 on
	// Java 17 by test/interop. Among points with the same value the last
	// server wins (TreeMap.put).
	KetamaSpy
)

const (
	ketamaPointsPerServer = 160 // MEMCACHED_POINTS_PER_SERVER_KETAMA
	ketamaPointsPerHash   = 4   // one MD5 digest gives four points
)

// Ketama is consistent hashing on a continuum of MD5 points
// (libmemcached's weighted mode, the one deployments use). Each server
// gets floor(w/W * 40 * n) * 4 points (160 with equal weights), four per
// MD5 digest of its label, read as little-endian uint32s from bytes 0–3,
// 4–7, 8–11 and 12–15. A key's hash is the first four bytes of MD5(key),
// little-endian; its server owns the first point >= the hash, wrapping to
// the first point.
//
// With Options.AutoEject, a server that fails FailureLimit times in a row
// leaves the continuum for RetryTimeout: its keys move to the next points,
// everyone else's stay. The continuum is rebuilt off to the side and
// swapped in atomically, so PickServer takes no lock.
type Ketama struct {
	format  KetamaFormat
	servers []*ketamaServer
	byAddr  map[string]*ketamaServer
	eject   bool
	limit   int
	retry   time.Duration
	now     func() time.Time

	cont atomic.Pointer[continuum]

	mu sync.Mutex // protects rebuilding (serialises rebuilds)
	// nextRebuild (unix nanoseconds) is when an ejected server is due back;
	// zero when none is out.
	nextRebuild atomic.Int64
}

type ketamaServer struct {
	Server
	addr      net.Addr
	label     string // host or host:port, before "-N"
	failures  atomic.Int32
	ejectedAt atomic.Int64 // unix nanoseconds until which it is out; 0 = in
}

type continuum struct {
	points []uint32 // sorted
	owner  []uint16 // owner[i] indexes Ketama.servers
}

// NewKetama returns a ketama selector over servers. opts may be nil.
func NewKetama(format KetamaFormat, servers []Server, opts *Options) (*Ketama, error) {
	if len(servers) == 0 {
		return nil, ErrNoServers
	}
	o := opts.withDefaults()
	k := &Ketama{format: format, byAddr: make(map[string]*ketamaServer), eject: o.AutoEject,
		limit: o.FailureLimit, retry: o.RetryTimeout, now: o.Now}
	for _, s := range servers {
		host, port := s.hostPort()
		label := s.Addr
		switch {
		case format == KetamaLibmemcached && port == 11211:
			label = host
		case format == KetamaSpy && port != 0:
			label = spyLabel(host, port, o.LookupHost)
		}
		ks := &ketamaServer{Server: s, addr: NewAddr(s.Addr), label: label}
		k.servers = append(k.servers, ks)
		k.byAddr[s.Addr] = ks
	}
	k.cont.Store(k.build(nil))
	return k, nil
}

// spyLabel is Java's InetSocketAddress.toString() for host and port, less
// the leading "/" that spymemcached strips: "ip:port" for an IP address,
// "name/ip:port" for a host name, which lookup resolves (first IPv4
// address, else the first one), and "name/<unresolved>:port" when it does
// not resolve.
func spyLabel(host string, port int, lookup func(string) ([]string, error)) string {
	p := ":" + strconv.Itoa(port)
	if ip := net.ParseIP(host); ip != nil {
		return javaIP(ip) + p
	}
	addrs, err := lookup(host)
	var ip net.IP
	for _, a := range addrs {
		if x := net.ParseIP(a); x != nil && (ip == nil || ip.To4() == nil && x.To4() != nil) {
			ip = x
		}
	}
	if err != nil || ip == nil {
		return host + "/<unresolved>" + p
	}
	return host + "/" + javaIP(ip) + p
}

// javaIP formats ip as Java's InetSocketAddress.toString() does (Java 14
// and later): dotted quad for IPv4 (and IPv4-mapped IPv6, which Java turns
// into an Inet4Address), else eight lower-case hex groups without zero
// compression, in brackets.
func javaIP(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	b := make([]byte, 0, 41)
	b = append(b, '[')
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b = append(b, ':')
		}
		b = strconv.AppendUint(b, uint64(ip[i])<<8|uint64(ip[i+1]), 16)
	}
	return string(append(b, ']'))
}

// build computes the continuum over the servers not in out.
func (k *Ketama) build(out []bool) *continuum {
	total, live := 0, 0
	for i, s := range k.servers {
		if out != nil && out[i] {
			continue
		}
		total += s.weight()
		live++
	}
	c := &continuum{}
	type point struct {
		v   uint32
		idx uint16
	}
	var pts []point
	var buf []byte
	for i, s := range k.servers {
		if out != nil && out[i] {
			continue
		}
		// libmemcached computes this in float (32-bit), then floors.
		pct := float32(s.weight()) / float32(total)
		n := int(math.Floor(float64(pct*float32(ketamaPointsPerServer)/float32(ketamaPointsPerHash)*float32(live))+1e-10)) * ketamaPointsPerHash
		for j := 0; j < n/ketamaPointsPerHash; j++ {
			buf = append(append(buf[:0], s.label...), '-')
			buf = strconv.AppendInt(buf, int64(j), 10)
			d := md5.Sum(buf)
			for h := 0; h < ketamaPointsPerHash; h++ {
				pts = append(pts, point{binary.LittleEndian.Uint32(d[h*4:]), uint16(i)})
			}
		}
	}
	slices.SortStableFunc(pts, func(a, b point) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return int(a.idx) - int(b.idx)
	})
	if k.format == KetamaSpy {
		// TreeMap.put: of equal points the one inserted last (the higher
		// server index) stays; keep the last of each run.
		w := 0
		for r := range pts {
			if r+1 < len(pts) && pts[r+1].v == pts[r].v {
				continue
			}
			pts[w] = pts[r]
			w++
		}
		pts = pts[:w]
	}
	c.points = make([]uint32, len(pts))
	c.owner = make([]uint16, len(pts))
	for i, p := range pts {
		c.points[i], c.owner[i] = p.v, p.idx
	}
	return c
}

// ketamaHash is the key hash: the first four bytes of MD5(key), little
// endian.
func ketamaHash(key string) uint32 {
	d := md5.Sum(stringBytes(key))
	return binary.LittleEndian.Uint32(d[:4])
}

// PickServer returns the server for key.
func (k *Ketama) PickServer(key string) (net.Addr, error) {
	if k.eject {
		k.maybeReadmit()
	}
	c := k.cont.Load()
	if len(c.points) == 0 {
		return nil, ErrNoServers
	}
	if len(k.servers) == 1 {
		return k.servers[0].addr, nil
	}
	h := ketamaHash(key)
	i, _ := slices.BinarySearch(c.points, h)
	if i == len(c.points) {
		i = 0
	}
	return k.servers[c.owner[i]].addr, nil
}

// Points returns the number of continuum points each server has now, in
// configuration order (0 for an ejected server).
func (k *Ketama) Points() []int {
	c := k.cont.Load()
	n := make([]int, len(k.servers))
	for _, o := range c.owner {
		n[o]++
	}
	return n
}

// Each calls f for every server, ejected or not.
func (k *Ketama) Each(f func(net.Addr) error) error {
	for _, s := range k.servers {
		if err := f(s.addr); err != nil {
			return err
		}
	}
	return nil
}

func (k *Ketama) serverOK(addr net.Addr) {
	if !k.eject {
		return
	}
	if s := k.byAddr[addr.String()]; s != nil && s.failures.Load() != 0 {
		s.failures.Store(0)
	}
}

func (k *Ketama) serverFailed(addr net.Addr) {
	if !k.eject {
		return
	}
	s := k.byAddr[addr.String()]
	if s == nil || s.failures.Add(1) < int32(k.limit) {
		return
	}
	s.failures.Store(0)
	until := k.now().Add(k.retry).UnixNano()
	s.ejectedAt.Store(until)
	k.rebuild()
}

// maybeReadmit puts ejected servers whose retry time has come back into the
// continuum. It costs one atomic load when nothing is ejected.
func (k *Ketama) maybeReadmit() {
	next := k.nextRebuild.Load()
	if next == 0 || k.now().UnixNano() < next {
		return
	}
	k.rebuild()
}

// rebuild recomputes the continuum from the servers' ejection times.
func (k *Ketama) rebuild() {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now().UnixNano()
	out := make([]bool, len(k.servers))
	var next int64
	anyOut := false
	for i, s := range k.servers {
		until := s.ejectedAt.Load()
		if until == 0 {
			continue
		}
		if until <= now {
			s.ejectedAt.Store(0)
			continue
		}
		out[i], anyOut = true, true
		if next == 0 || until < next {
			next = until
		}
	}
	if !anyOut {
		out = nil
	}
	k.cont.Store(k.build(out))
	k.nextRebuild.Store(next)
}
