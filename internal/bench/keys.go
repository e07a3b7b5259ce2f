package bench

import (
	"math/bits"
	"math/rand/v2"
)

// keyspace turns key indexes into key bytes and expected value sizes. It is
// immutable and shared by all connections.
type keyspace struct {
	prefix           string
	width            int
	min, max         uint64
	sizeMin, sizeMax int // equal for fixed sizes
}

func newKeyspace(c *Config) *keyspace {
	ks := &keyspace{prefix: c.KeyPrefix, width: c.KeyWidth, min: c.KeyMin, max: c.KeyMax,
		sizeMin: c.DataSize, sizeMax: c.DataSize}
	if c.DataSizeMax > 0 {
		ks.sizeMin, ks.sizeMax = c.DataSizeMin, c.DataSizeMax
	}
	return ks
}

// appendKey appends the key for index i: the prefix and i zero-padded to
// the key width.
func (ks *keyspace) appendKey(dst []byte, i uint64) []byte {
	dst = append(dst, ks.prefix...)
	var digits [20]byte
	n := len(digits)
	for {
		n--
		digits[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			break
		}
	}
	for pad := ks.width - (len(digits) - n); pad > 0; pad-- {
		dst = append(dst, '0')
	}
	return append(dst, digits[n:]...)
}

// valueSize is the size of the value stored under key index i.
func (ks *keyspace) valueSize(i uint64) int {
	if ks.sizeMax == ks.sizeMin {
		return ks.sizeMin
	}
	return ks.sizeMin + int(mix64(i)%uint64(ks.sizeMax-ks.sizeMin+1))
}

// mulDiv is a*b/c without overflow (b < c).
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// mix64 is splitmix64's finaliser: a cheap, well-spread hash of i.
func mix64(i uint64) uint64 {
	i += 0x9e3779b97f4a7c15
	i = (i ^ (i >> 30)) * 0xbf58476d1ce4e5b9
	i = (i ^ (i >> 27)) * 0x94d049bb133111eb
	return i ^ (i >> 31)
}

// picker chooses key indexes and operations for one connection. It is owned
// by that connection.
type picker struct {
	rng     *rand.Rand
	pattern Pattern
	min     uint64
	span    uint64 // max-min+1
	mean    float64
	stddev  float64
	next    uint64 // sequential: next index
	lo, hi  uint64 // sequential: this connection's slice [lo, hi)
	zipf    zipf   // zipf and scan: the ranks' distribution
	// scan: the cycle of scanEvery requests ends with scanLen keys of the
	// scan; scanPos is the position in it, scanNext the offset (from min)
	// of the scan's next key.
	scanEvery, scanLen uint64
	scanPos, scanNext  uint64
	scanned            bool // the last key came from a scan
	setN               int  // ratio
	cycle              int  // set+get
	pos                int  // position in the ratio cycle
}

// newPicker returns the picker of connection conn out of nconns.
func newPicker(c *Config, conn, nconns int) *picker {
	seed := c.Seed + uint64(conn)
	p := &picker{
		rng:     rand.New(rand.NewPCG(seed, mix64(seed))),
		pattern: c.Pattern,
		min:     c.KeyMin,
		span:    c.KeyMax - c.KeyMin + 1,
		mean:    float64(c.KeyMin) + float64(c.KeyMax-c.KeyMin)/2,
		stddev:  c.KeyStddev,
		setN:    c.Ratio.Set,
		cycle:   c.Ratio.Set + c.Ratio.Get,
	}
	// Sequential: connection k walks [span*k/n, span*(k+1)/n).
	n := uint64(nconns)
	p.lo = p.span * uint64(conn) / n
	p.hi = p.span * uint64(conn+1) / n
	if p.hi == p.lo { // more connections than keys
		p.lo, p.hi = uint64(conn)%p.span, uint64(conn)%p.span+1
	}
	p.next = p.lo
	if c.Pattern == Zipf || c.Pattern == Scan {
		p.zipf = newZipf(c.ZipfAlpha, p.span)
	}
	if c.Pattern == Scan {
		// Connection k of n: its scan starts (n+k)/2n of the way
		// through the range (in the upper, less popular half), its
		// cycle k/n of the way through.
		p.scanEvery, p.scanLen = c.ScanEvery, c.ScanLength
		p.scanPos = mulDiv(c.ScanEvery, uint64(conn), n)
		p.scanNext = p.span/2 + mulDiv(p.span/2, uint64(conn), n)
	}
	// Start each connection at a different point of the ratio cycle, so a
	// 1:9 mix does not send every connection's set at once.
	p.pos = conn % p.cycle
	return p
}

// key returns the next key index.
func (p *picker) key() uint64 {
	switch p.pattern {
	case Zipf:
		return p.min + p.zipf.rank(p.rng) - 1
	case Scan:
		inScan := p.scanPos >= p.scanEvery-p.scanLen
		p.scanPos++
		if p.scanPos == p.scanEvery {
			p.scanPos = 0
		}
		p.scanned = inScan
		if !inScan {
			return p.min + p.zipf.rank(p.rng) - 1
		}
		k := p.scanNext
		p.scanNext++
		if p.scanNext == p.span {
			p.scanNext = 0
		}
		return p.min + k
	case Sequential:
		k := p.next
		p.next++
		if p.next == p.hi {
			p.next = p.lo
		}
		return p.min + k
	case Gaussian:
		for range 10 {
			v := p.rng.NormFloat64()*p.stddev + p.mean
			if v >= float64(p.min) && v < float64(p.min+p.span) {
				return uint64(v)
			}
		}
		return p.min + p.span/2
	}
	return p.min + p.rng.Uint64N(p.span)
}

// isSet reports whether the next request is a set, following the ratio
// deterministically (memtier does the same): in each cycle of set+get
// requests, the first Set are sets.
func (p *picker) isSet() bool {
	s := p.pos < p.setN
	p.pos++
	if p.pos == p.cycle {
		p.pos = 0
	}
	return s
}
