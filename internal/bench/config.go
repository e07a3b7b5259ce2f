package bench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Protocol is the wire protocol a run speaks.
type Protocol uint8

// Protocols. The zero value is the classic text protocol.
const (
	// Text is memcached's classic text protocol: "get k1 k2", "set k 0 0 n".
	Text Protocol = iota
	// Meta is the meta text protocol: "mg k v k", "ms k n"; multi-gets are
	// quiet mg commands closed by "mn".
	Meta
	// Binary is the binary protocol: GETK (GETKQ… GETK for multi-gets) and
	// SET.
	Binary
)

// String returns the name ParseProtocol accepts.
func (p Protocol) String() string {
	switch p {
	case Text:
		return "text"
	case Meta:
		return "meta"
	case Binary:
		return "binary"
	}
	return "protocol(" + strconv.Itoa(int(p)) + ")"
}

// ParseProtocol parses "text" (or "ascii", memtier's name), "meta" or
// "binary".
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(s) {
	case "text", "ascii", "memcache_text":
		return Text, nil
	case "meta":
		return Meta, nil
	case "binary", "memcache_binary":
		return Binary, nil
	}
	return 0, fmt.Errorf("bench: unknown protocol %q (want text, meta or binary)", s)
}

// Pattern is how keys are picked from [KeyMin, KeyMax].
type Pattern uint8

// Key patterns. The zero value is uniform.
const (
	// Uniform picks every key with equal probability.
	Uniform Pattern = iota
	// Gaussian picks keys around the middle of the range with standard
	// deviation KeyStddev (default: a sixth of the range), resampling
	// values that fall outside it.
	Gaussian
	// Sequential gives each connection its own contiguous slice of the
	// range and walks it in order, wrapping around. With Requests equal
	// to the number of keys and no gets, every key is written exactly once
	// (this is how the harnesses preload).
	Sequential
	// Zipf picks key KeyMin+k-1 with probability proportional to k^-α
	// (ZipfAlpha), k = 1..KeyMax-KeyMin+1: KeyMin is the most popular
	// key. Any α > 0 (zipf.go).
	Zipf
	// Scan is Zipf traffic with periodic sequential scans, the pattern
	// that flushes a plain LRU: each connection repeats a cycle of
	// ScanEvery requests, the first ScanEvery-ScanLength drawn from the
	// Zipf distribution and the last ScanLength the next ScanLength
	// consecutive keys of a scan that continues, cycle after cycle, where
	// the last one stopped (wrapping at KeyMax). Connection i of n starts
	// its scan at the key (n+i)/2n of the way through the range (in the
	// upper half, away from the popular low keys; a lone connection at the
	// middle) and its cycle i/n of the way through.
	Scan
)

// String returns the name ParsePattern accepts.
func (p Pattern) String() string {
	switch p {
	case Uniform:
		return "uniform"
	case Gaussian:
		return "gaussian"
	case Sequential:
		return "sequential"
	case Zipf:
		return "zipf"
	case Scan:
		return "scan"
	}
	return "pattern(" + strconv.Itoa(int(p)) + ")"
}

// ParsePattern parses "uniform", "gaussian", "sequential", "zipf" or
// "scan", or memtier's one-letter names R, G and S.
func ParsePattern(s string) (Pattern, error) {
	switch strings.ToLower(s) {
	case "uniform", "random", "r":
		return Uniform, nil
	case "gaussian", "g":
		return Gaussian, nil
	case "sequential", "s":
		return Sequential, nil
	case "zipf":
		return Zipf, nil
	case "scan":
		return Scan, nil
	}
	return 0, fmt.Errorf("bench: unknown key pattern %q (want uniform, gaussian, sequential, zipf or scan)", s)
}

// Ratio is the mix of sets and gets, memtier's "set:get".
type Ratio struct {
	Set, Get int
}

// String formats the ratio as "set:get".
func (r Ratio) String() string { return strconv.Itoa(r.Set) + ":" + strconv.Itoa(r.Get) }

// ParseRatio parses "set:get", e.g. "1:9" or "0:1".
func ParseRatio(s string) (Ratio, error) {
	a, b, ok := strings.Cut(s, ":")
	if ok {
		set, err1 := strconv.Atoi(a)
		get, err2 := strconv.Atoi(b)
		if err1 == nil && err2 == nil && set >= 0 && get >= 0 && set+get > 0 {
			return Ratio{Set: set, Get: get}, nil
		}
	}
	return Ratio{}, fmt.Errorf("bench: bad ratio %q (want set:get, e.g. 1:9)", s)
}

// Defaults used when a Config field is zero.
const (
	DefaultClients  = 50
	DefaultDataSize = 100
	DefaultKeyMax   = 99_999
	DefaultDuration = 10 * time.Second
	DefaultTimeout  = 5 * time.Second
	DefaultPrefix   = "key:"
	// DefaultZipfAlpha is the exponent of the zipf and scan patterns.
	DefaultZipfAlpha = 1.0
)

// DefaultRatio is 1 set for every 9 gets.
var DefaultRatio = Ratio{Set: 1, Get: 9}

// Config describes one load run. Zero values mean the documented default,
// so Config{Servers: []string{addr}} is a valid run.
type Config struct {
	// Servers are host:port addresses. Each gets Threads×Clients
	// connections; all use the same key space.
	Servers []string
	// Protocol is text (default), meta or binary.
	Protocol Protocol
	// Threads is the number of OS threads that run the load (GOMAXPROCS
	// for the duration of Run, restored afterwards; this is process-wide).
	// Zero leaves GOMAXPROCS alone and counts as 1 for the number of
	// connections.
	Threads int
	// Clients is the number of connections per thread per server
	// (memtier's -c). Zero means DefaultClients.
	Clients int
	// Pipeline is the number of requests in flight per connection. Zero
	// means 1 (no pipelining).
	Pipeline int
	// Ratio is the set:get mix. Zero means DefaultRatio (1:9).
	Ratio Ratio
	// DataSize is the value size in bytes for sets, and the length a get
	// hit must return. Zero means DefaultDataSize (100). Ignored when
	// DataSizeMax is set.
	DataSize int
	// DataSizeMin and DataSizeMax, when DataSizeMax > 0, spread value sizes
	// over [DataSizeMin, DataSizeMax] bytes by a hash of the key index.
	DataSizeMin, DataSizeMax int
	// KeyPrefix starts every key. Empty means DefaultPrefix ("key:").
	KeyPrefix string
	// KeyMin and KeyMax bound the key index (inclusive). KeyMax zero means
	// DefaultKeyMax (99999, so 100k keys).
	KeyMin, KeyMax uint64
	// KeyWidth zero-pads the key index to this many digits. Zero means the
	// number of digits of KeyMax, so all keys have the same length.
	KeyWidth int
	// Pattern picks keys: uniform (default), gaussian, sequential, zipf
	// or scan.
	Pattern Pattern
	// KeyStddev is the gaussian pattern's standard deviation in keys. Zero
	// means (KeyMax-KeyMin)/6.
	KeyStddev float64
	// ZipfAlpha is the exponent α of the zipf and scan patterns (any
	// α > 0; 0.8, 1.0 and 1.2 are the usual ones). Zero means
	// DefaultZipfAlpha (1.0).
	ZipfAlpha float64
	// ScanLength is the number of consecutive keys each scan of the scan
	// pattern reads. Zero means a quarter of the key range.
	ScanLength uint64
	// ScanEvery is the scan pattern's cycle in requests per connection: a
	// scan of ScanLength ends every ScanEvery requests. Zero means
	// 4×ScanLength, so that scans are a quarter of the requests.
	ScanEvery uint64
	// MultiGet is the number of keys per get request. Zero means 1.
	MultiGet int
	// Duration bounds the run in time when Requests is zero. Zero means
	// DefaultDuration (10 s).
	Duration time.Duration
	// Requests, when not zero, bounds the run by the total number of
	// requests (over all connections) instead of by time.
	Requests uint64
	// Rate, when not zero, is the total request rate (requests per second
	// over all connections) of an open-loop run. Zero means closed loop.
	Rate float64
	// Seed seeds the per-connection random generators (connection i uses
	// Seed+i), so runs are repeatable.
	Seed uint64
	// Timeout is how long a connection waits for a reply before counting an
	// error and giving up. Zero means DefaultTimeout (5 s).
	Timeout time.Duration
	// Progress, when not nil, receives a progress line once per second.
	Progress io.Writer
	// ProgressTTY makes progress lines overwrite each other ("\r") instead
	// of being printed one per line.
	ProgressTTY bool
	// Arrival also measures each reply's latency to the time the kernel
	// received its last bytes (SO_TIMESTAMPNS, read with recvmsg), into
	// Result.Arrival. The usual latency runs to the parse of the reply and
	// so includes the time the reply waited for the generator, which on a
	// generator sharing its core with a server can be most of a tail.
	// Linux on 64-bit ports only.
	Arrival bool
	// TLSCA, when set, makes every connection TLS, the server verified
	// against the CA certificates in this PEM file (servers run with -Z).
	TLSCA string
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Clients == 0 {
		c.Clients = DefaultClients
	}
	if c.Pipeline == 0 {
		c.Pipeline = 1
	}
	if c.Ratio == (Ratio{}) {
		c.Ratio = DefaultRatio
	}
	if c.DataSize == 0 {
		c.DataSize = DefaultDataSize
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultPrefix
	}
	if c.KeyMax == 0 {
		c.KeyMax = DefaultKeyMax
	}
	if c.KeyWidth == 0 {
		c.KeyWidth = len(strconv.FormatUint(c.KeyMax, 10))
	}
	if c.KeyStddev == 0 {
		c.KeyStddev = float64(c.KeyMax-c.KeyMin) / 6
	}
	if c.ZipfAlpha == 0 {
		c.ZipfAlpha = DefaultZipfAlpha
	}
	if c.ScanLength == 0 {
		c.ScanLength = (c.KeyMax-c.KeyMin)/4 + 1
	}
	if c.ScanEvery == 0 {
		c.ScanEvery = 4 * min(c.ScanLength, math.MaxUint64/4)
	}
	if c.MultiGet == 0 {
		c.MultiGet = 1
	}
	if c.Duration == 0 && c.Requests == 0 {
		c.Duration = DefaultDuration
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// ErrInvalidConfig is wrapped by the errors Validate returns.
var ErrInvalidConfig = errors.New("bench: invalid config")

// Validate reports a configuration that cannot run.
func (c *Config) Validate() error {
	d := c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case len(d.Servers) == 0:
		return bad("no server (-s host:port)")
	case d.Threads < 0 || d.Clients < 0 || d.Pipeline < 0 || d.MultiGet < 0:
		return bad("threads, clients, pipeline and multi-get must not be negative")
	case d.Protocol > Binary:
		return bad("unknown protocol %d", d.Protocol)
	case d.Pattern > Scan:
		return bad("unknown key pattern %d", d.Pattern)
	case !(d.ZipfAlpha > 0) || math.IsInf(d.ZipfAlpha, 0):
		return bad("zipf exponent %g must be a positive number", d.ZipfAlpha)
	case d.Pattern == Scan && d.ScanLength >= d.ScanEvery:
		return bad("a scan of %d keys every %d requests leaves no Zipf requests", d.ScanLength, d.ScanEvery)
	case d.Ratio.Set < 0 || d.Ratio.Get < 0:
		return bad("ratio %s has a negative part", d.Ratio)
	case d.KeyMin > d.KeyMax:
		return bad("key range [%d, %d] is empty", d.KeyMin, d.KeyMax)
	case d.DataSizeMax > 0 && (d.DataSizeMin < 1 || d.DataSizeMin > d.DataSizeMax):
		return bad("value size range [%d, %d] is invalid", d.DataSizeMin, d.DataSizeMax)
	case d.DataSize < 0 || d.DataSizeMax > 1<<30:
		return bad("value size out of range")
	case d.Rate < 0:
		return bad("rate must not be negative")
	case d.Duration < 0 || d.Timeout < 0:
		return bad("durations must not be negative")
	case d.MultiGet > 1 && d.Ratio.Get == 0:
		return bad("multi-get with no gets in the ratio")
	}
	keyLen := len(d.KeyPrefix) + max(d.KeyWidth, len(strconv.FormatUint(d.KeyMax, 10)))
	if keyLen > 250 {
		return bad("keys would be %d bytes, longer than memcached's 250", keyLen)
	}
	if d.Protocol == Text && d.MultiGet*(keyLen+1) > 2000 {
		return bad("a %d-key text get would exceed memcached's 2048-byte line", d.MultiGet)
	}
	return nil
}

// patternDesc names the key pattern with its parameters, for a Result:
// "zipf α=0.8", "scan α=1 500000 every 2000000".
func (c *Config) patternDesc() string {
	alpha := " α=" + strconv.FormatFloat(c.ZipfAlpha, 'g', -1, 64)
	switch c.Pattern {
	case Zipf:
		return c.Pattern.String() + alpha
	case Scan:
		return c.Pattern.String() + alpha + " " + strconv.FormatUint(c.ScanLength, 10) + " every " + strconv.FormatUint(c.ScanEvery, 10)
	}
	return c.Pattern.String()
}

// connections returns the number of connections per server.
func (c *Config) connections() int { return max(c.Threads, 1) * c.Clients }

// Args returns the "vbcache bench" command-line flags that reproduce c
// (zero fields are left out, so their defaults apply). Progress is not
// included. cmd/vbcache's tests check that parsing Args gives c back.
func (c *Config) Args() []string {
	var a []string
	add := func(name, v string) { a = append(a, "--"+name, v) }
	for _, s := range c.Servers {
		add("s", s)
	}
	if c.Protocol != Text {
		add("protocol", c.Protocol.String())
	}
	if c.Threads != 0 {
		add("threads", strconv.Itoa(c.Threads))
	}
	if c.Clients != 0 {
		add("clients", strconv.Itoa(c.Clients))
	}
	if c.Pipeline != 0 {
		add("pipeline", strconv.Itoa(c.Pipeline))
	}
	if c.Ratio != (Ratio{}) {
		add("ratio", c.Ratio.String())
	}
	if c.DataSize != 0 {
		add("data-size", strconv.Itoa(c.DataSize))
	}
	if c.DataSizeMax != 0 {
		add("data-size-range", strconv.Itoa(c.DataSizeMin)+"-"+strconv.Itoa(c.DataSizeMax))
	}
	if c.KeyPrefix != "" {
		add("key-prefix", c.KeyPrefix)
	}
	if c.KeyMin != 0 {
		add("key-minimum", strconv.FormatUint(c.KeyMin, 10))
	}
	if c.KeyMax != 0 {
		add("key-maximum", strconv.FormatUint(c.KeyMax, 10))
	}
	if c.KeyWidth != 0 {
		add("key-width", strconv.Itoa(c.KeyWidth))
	}
	if c.Pattern != Uniform {
		add("key-pattern", c.Pattern.String())
	}
	if c.KeyStddev != 0 {
		add("key-stddev", strconv.FormatFloat(c.KeyStddev, 'g', -1, 64))
	}
	if c.ZipfAlpha != 0 {
		add("zipf-alpha", strconv.FormatFloat(c.ZipfAlpha, 'g', -1, 64))
	}
	if c.ScanLength != 0 {
		add("scan-length", strconv.FormatUint(c.ScanLength, 10))
	}
	if c.ScanEvery != 0 {
		add("scan-every", strconv.FormatUint(c.ScanEvery, 10))
	}
	if c.MultiGet != 0 {
		add("multi-get", strconv.Itoa(c.MultiGet))
	}
	if c.Duration != 0 {
		add("test-time", c.Duration.String())
	}
	if c.Requests != 0 {
		add("requests", strconv.FormatUint(c.Requests, 10))
	}
	if c.Rate != 0 {
		add("rate", strconv.FormatFloat(c.Rate, 'g', -1, 64))
	}
	if c.Arrival {
		a = append(a, "--arrival")
	}
	if c.TLSCA != "" {
		add("tls-ca", c.TLSCA)
	}
	if c.Seed != 0 {
		add("seed", strconv.FormatUint(c.Seed, 10))
	}
	if c.Timeout != 0 {
		add("timeout", c.Timeout.String())
	}
	return a
}
