package memcache

import (
	"fmt"
	"net"
	"strings"
	"time"
)

// Options tune the selectors. The zero value (or a nil *Options) means the
// defaults, which reproduce the libraries' plain behaviour: no rehash, no
// ejection.
type Options struct {
	// Rehash (modulo, modulo-python): move keys off a dead server as
	// Cache::Memcached (modulo) or python-memcached (modulo-python) does.
	// A server is dead from its first failed connection for RetryTimeout.
	Rehash bool

	// AutoEject (ketama, ketama-spy): after FailureLimit consecutive
	// failures take the server out of the continuum for RetryTimeout, then
	// put it back (twemproxy's auto_eject_hosts, server_failure_limit and
	// server_retry_timeout). Off by default: ejecting moves keys, so two
	// clients that disagree about a server's health disagree about
	// placement.
	AutoEject bool

	// FailureLimit is the number of consecutive failures that eject a
	// server. Zero means 2 (twemproxy's default).
	FailureLimit int

	// RetryTimeout is how long a dead or ejected server stays out. Zero
	// means 30 s (twemproxy's server_retry_timeout).
	RetryTimeout time.Duration

	// VBuckets (vbucket) is the number of vbuckets of a map spread evenly
	// over the servers when Config is nil. Zero means 1024.
	VBuckets int

	// Config (vbucket) is a cluster map in Couchbase's terse JSON; its
	// serverList replaces the server list.
	Config []byte

	// Now is the clock for retry timeouts. Nil means time.Now.
	Now func() time.Time

	// LookupHost (ketama-spy) resolves a host name to addresses once,
	// when the selector is built: spymemcached hashes a name together
	// with its address. Nil means net.LookupHost.
	LookupHost func(host string) (addrs []string, err error)
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.FailureLimit <= 0 {
		r.FailureLimit = 2
	}
	if r.RetryTimeout <= 0 {
		r.RetryTimeout = 30 * time.Second
	}
	if r.VBuckets <= 0 {
		r.VBuckets = 1024
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.LookupHost == nil {
		r.LookupHost = net.LookupHost
	}
	return r
}

// Distributions lists the names NewSelector knows, each with the client
// libraries whose placement it reproduces.
var Distributions = []struct{ Name, Matches string }{
	{"modulo", "Cache::Memcached (Perl): ((crc32(key)>>16)&0x7fff) % buckets, weights expand the list; Options.Rehash for its dead-server rehash"},
	{"modulo-python", "python-memcached: as modulo with a zero hash turned into 1; Options.Rehash for its dead-server rehash"},
	{"modulo-crc32", "gomemcache (bradfitz/gomemcache ServerList): crc32(key) % n"},
	{"modulo-oaat", "libmemcached's default distribution (pylibmc, php-memcached, memcached tools without options): one-at-a-time % n, weights ignored"},
	{"ketama", "libmemcached weighted ketama: pylibmc ketama_weighted, php-memcached OPT_LIBKETAMA_COMPATIBLE, npm memcached, twemproxy (hash md5)"},
	{"ketama-spy", "spymemcached KetamaNodeLocator (KETAMA_HASH, weighted or not) and Java clients on it: MD5 of ip:port-N, name/ip:port-N for a host name (resolved now); Couchbase SDK memcached buckets (RFC 26) given IP addresses"},
	{"vbucket", "Couchbase vbuckets: (crc32(key)>>16)&0x7fff % vbuckets through a cluster map (libvbucket, libcouchbase, gocbcore)"},
}

// NewSelector returns the selector called distribution (see Distributions)
// over servers. opts may be nil.
func NewSelector(distribution string, servers []Server, opts *Options) (ServerSelector, error) {
	switch distribution {
	case "modulo":
		return NewModulo(HashCRC15, servers, opts)
	case "modulo-python":
		return NewModulo(HashCRC15NonZero, servers, opts)
	case "modulo-oaat":
		return NewModulo(HashOAAT, servers, opts)
	case "modulo-crc32":
		if len(servers) == 0 {
			return nil, ErrNoServers
		}
		// Not SetServers: that resolves names, and locate should print
		// the servers as configured. Placement does not depend on it.
		ss := new(ServerList)
		for _, s := range servers {
			a := NewAddr(s.Addr)
			for i := 0; i < s.weight(); i++ {
				ss.addrs = append(ss.addrs, a)
			}
		}
		return ss, nil
	case "ketama":
		return NewKetama(KetamaLibmemcached, servers, opts)
	case "ketama-spy":
		return NewKetama(KetamaSpy, servers, opts)
	case "vbucket":
		o := opts.withDefaults()
		if o.Config != nil {
			return NewVBucketFromJSON(o.Config)
		}
		var addrs []string
		for _, s := range servers {
			addrs = append(addrs, s.Addr)
		}
		return NewVBucket(addrs, o.VBuckets)
	}
	var names []string
	for _, d := range Distributions {
		names = append(names, d.Name)
	}
	return nil, fmt.Errorf("%w %q (one of %s)", errUnknownDistribution, distribution, strings.Join(names, ", "))
}
