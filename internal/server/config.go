package server

import (
	"crypto/tls"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// Protocol selects which protocols a listener accepts (-B).
type Protocol uint8

// Protocols, as memcached's -B.
const (
	ProtoAuto Protocol = iota
	ProtoASCII
	ProtoBinary
)

// Config is a node's configuration. Zero values mean memcached's defaults;
// internal/server/cmdline turns memcached's command-line flags into this
// struct. Validate reports invalid combinations with the wording
// memcached uses at start-up.
type Config struct {
	Port           int           // -p TCP port (11211); 0 disables TCP; -1 picks an ephemeral port
	PortSet        bool          // -p was given (0 then really means off)
	UDPPort        int           // -U UDP port (0: off)
	Listen         []string      // -l addresses (all interfaces)
	UnixSocket     string        // -s path; disables TCP and UDP
	UnixMask       uint32        // -a permissions of the unix socket (0700)
	MaxConns       int           // -c (1024)
	Threads        int           // -t (4); reported in stats, sizes the store's shards
	ReqsPerEvent   int           // -R (20)
	Backlog        int           // -b (1024)
	Protocol       Protocol      // -B
	Verbose        int           // -v count
	EnableShutdown bool          // -A
	DisableFlush   bool          // -F
	DisableDumps   bool          // -X: no cachedump, metadump, stats detail
	DisableWatch   bool          // -W
	PrefixDelim    byte          // -D (':'); setting it enables stats detail
	DetailEnabled  bool          // stats detail on at start (set by -D)
	IdleTimeout    time.Duration // -o idle_timeout (0: never)
	NoEventLoops   bool          // a goroutine per connection instead of event loops (loop.go); for comparisons and tests
	MaxConnsFast   bool          // reject extra connections with "ERROR Too many open connections" (default on)
	// MaxConnsPerIP is -o max_conns_per_ip (vbcache): the connections one
	// client address may hold at once; more are refused as -c refuses
	// them. 0: no limit.
	MaxConnsPerIP int
	// MaxUnauthConns is -o max_unauth_conns (vbcache): with -S or -Y, the
	// connections that may be open and not yet authenticated at once;
	// more are refused as -c refuses them. 0: no limit.
	MaxUnauthConns int
	// UnauthTimeout is -o unauth_timeout (vbcache, seconds): with -S or
	// -Y, a connection that has not authenticated this long after its
	// accept is closed (stats unauth_kicks). 0: no limit.
	UnauthTimeout time.Duration
	LRUCrawler    bool // -o lru_crawler (on) / no_lru_crawler
	// NoLRUMaintainer is -o no_lru_maintainer (or no_modern): memcached
	// then has a flat LRU and leaves the segment statistics out of stats.
	NoLRUMaintainer bool
	SlabReassign    bool   // reported in stats settings
	TrackSizes      bool   // -o track_sizes
	PortFile        string // MEMCACHED_PORT_FILENAME: write "TCP INET: <port>" lines here
	Version         string // reported by "version" (build version)

	// SASL is -S: binary-protocol clients must authenticate with SASL
	// (PLAIN, SCRAM-SHA-1/256/512) before any other command.
	SASL bool
	// SASLPasswords are the SASL credentials, loaded from the file
	// MEMCACHED_SASL_PWDB names ("user:password" lines). Server.SetLogins
	// replaces them (SIGHUP).
	SASLPasswords *sasl.Passwords
	// ClusterAuth is --cluster-auth: the cluster administrator's login
	// (cluster mode only). A connection that authenticates over SASL as
	// ClusterAuth.User is given the admin role, which every cluster-control
	// request needs (controlOp); the node logs in to its peers with it for
	// streams and lease queries. SASL is offered for it even without -S.
	// On a TLS connection whose client certificate was verified
	// (ssl_verify_mode 1-3), a certificate whose common name is
	// ClusterAuth.User gives the role without SASL. Over plain TCP the
	// administrator may log in only with SCRAM, which never sends the
	// password; PLAIN is refused for that user unless the connection is TLS.
	// Its Previous password logs in too (a rotation); Server.SetLogins
	// replaces it.
	ClusterAuth *admin.Credentials
	// InsecureCluster is --insecure-cluster: serve cluster-control
	// requests from anyone, as before issue 23. Without it and without
	// ClusterAuth, a cluster node refuses them all.
	InsecureCluster bool
	// AuthTokens is -Y: text-protocol clients must first send
	// "set <any> <f> <e> <n>" with "<user> <pass>" as data. Server.SetLogins
	// replaces them.
	AuthTokens *sasl.Passwords
	AuthFile   string // the -Y file, for stats settings
	// TLS is -Z with memcached's ssl_* options: when set, every TCP
	// listener speaks TLS (except -l entries marked notls:).
	TLS *tls.Config
	// TLSSettings are -Z's ssl_* options as given, for "stats settings";
	// nil without -Z.
	TLSSettings *tlsconf.Options
	// TLSReload re-reads the certificate, key and CA files (the
	// refresh_certs command); nil without -Z.
	TLSReload func() error
	// PeerTLS is what a cluster node dials its peers with (streams and
	// lease queries) when its listeners speak TLS: its own certificate,
	// and the cluster's CA to verify theirs (tlsconf.Reloader's
	// ClientConfig). Nil dials plain TCP.
	PeerTLS *tls.Config

	// VBuckets is --vbuckets: 0 runs the node standalone (plain memcached,
	// vbucket ids ignored); a power of two up to 65536 runs it in cluster
	// mode with that many vbuckets, all dead at start (see cluster.go).
	VBuckets int
	// VBucketParkTimeout bounds how long a request for a pending vbucket
	// is parked before it is answered with a temporary failure. Zero means
	// DefaultVBucketParkTimeout.
	VBucketParkTimeout time.Duration
	// StreamLogBytes bounds the ring of recent mutations kept for each
	// vbucket that is being streamed to another node (-o
	// stream_log_bytes; 0: stream.DefaultMaxRingBytes).
	StreamLogBytes int
	// SyncReplication (--sync-replication) answers a write to an active
	// vbucket only once every stream copying the vbucket (its replicas',
	// a move's) has acknowledged it, and at least one stream does when
	// the stored cluster map gives the vbucket a replica, waiting at most
	// VBucketParkTimeout, after which the write is answered with an error
	// (StatusSyncWriteAmbiguous; text SERVER_ERROR), not acknowledged;
	// a vbucket the map gives no replica is answered
	// once its open streams (if any) have the write. Replication is
	// otherwise asynchronous (internal/stream, "Durability").
	SyncReplication bool

	// CutControl is a test hook (issue 20's "link to the manager cut"):
	// while it holds true the node answers none of the requests a manager
	// sends (LEASE, SET_VBUCKET, GET_VBUCKET, DEL_VBUCKET,
	// SET_CLUSTER_CONFIG, the stream control requests) and closes their
	// connection instead, as if the manager's link were cut, while its
	// clients and its peers (LEASE_QUERY, GET_CLUSTER_CONFIG, streams)
	// still reach it. Nil in every real configuration.
	CutControl *atomic.Bool

	Store store.Config

	// outputFloor, when above 0, replaces maxOutput's 64 MiB floor: a
	// test of the output budget fills a few MiB, not 64.
	outputFloor int64
}

// DefaultVBucketParkTimeout is the park bound when
// Config.VBucketParkTimeout is zero.
const DefaultVBucketParkTimeout = time.Second
