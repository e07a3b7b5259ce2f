package cmdline

import (
	"fmt"
	"strings"

	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// Exit statuses, as memcached uses them (sysexits.h).
const (
	ExitFailure = 1  // EXIT_FAILURE: most flag errors
	ExitUsage   = 64 // EX_USAGE: settings that do not fit together
	ExitNoUser  = 67 // EX_NOUSER: -u names no user
	ExitOSErr   = 71 // EX_OSERR: cannot bind, cannot set limits
)

// ExitError is a start-up failure: Msg goes to stderr as is, and the
// process exits with Code.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

func fail(code int, format string, args ...any) error {
	return &ExitError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Action is what "vbcache server" was asked to do.
type Action uint8

const (
	ActionRun     Action = iota // start the node
	ActionHelp                  // -h: print HelpText
	ActionVersion               // -V: print the version
	ActionLicense               // -i: print the license
)

// Options is the parsed command line: the node's Config, plus what
// belongs to the process rather than the node (daemon, pid file, user,
// memory locking), which the caller acts on, and the memcached settings
// vbcache accepts but has no use for, kept so that they are checked as
// memcached checks them.
type Options struct {
	Config server.Config
	Action Action

	Daemonize  bool   // -d
	PIDFile    string // -P
	User       string // -u
	LockMemory bool   // -k
	CoreDumps  bool   // -r
	LargePages bool   // -L (accepted; huge pages are the default, -o no_hugepages turns them off)

	// MetricsListen is --metrics-listen: where the process serves its
	// Prometheus metrics over HTTP (/metrics); "" (the default) serves
	// none, so a plain node is what memcached is.
	MetricsListen string

	// Warnings are for stderr before starting: Parse's, then those
	// Finish adds while it loads the TLS settings.
	Warnings []string

	// Raw values whose zero means something other than "default" to
	// memcached, checked after the flags (Finish).
	memSet       bool
	memMB        int64
	itemSizeSet  bool
	itemSize     int64
	chunkMaxSet  bool // -o slab_chunk_max or no_chunked_items
	tempTTLSet   bool // -o temporary_ttl
	lruMaintain  bool // -o lru_maintainer / no_lru_maintainer / no_modern
	slabSizesRaw *string
	tcpSet       bool // -p
	udpSet       bool // -U
	protoSet     bool // -B (-S then requires binary)
	listenRaw    []string

	// Authentication and TLS (security.go): the files are read by
	// Finish, after every other check, as memcached reads them.
	tlsEnabled  bool              // -Z
	tlsOpts     tlsconf.Options   // -o ssl_*
	tlsReloader *tlsconf.Reloader // built by Finish under -Z; serves Config.TLS
	saslPWDB    string            // MEMCACHED_SASL_PWDB, read by -S
	clusterAuth string            // --cluster-auth's file
	authFile    string            // -Y

	// Accepted for compatibility and otherwise ignored.
	napiIDs   int
	hashAlgo  string
	slabSizes []int
}

// option describes one memcached flag: its short letter, long name and
// whether it takes a value.
type option struct {
	short byte
	long  string
	arg   bool
}

// options lists every flag the parser knows, including -e, which it
// refuses with a clear message. Order is -h's.
var options = []option{
	{'p', "port", true},
	{'U', "udp-port", true},
	{'s', "unix-socket", true},
	{'a', "unix-mask", true},
	{'A', "enable-shutdown", false},
	{'l', "listen", true},
	{'d', "daemon", false},
	{'r', "enable-coredumps", false},
	{'u', "user", true},
	{'m', "memory-limit", true},
	{'M', "disable-evictions", false},
	{'c', "conn-limit", true},
	{'k', "lock-memory", false},
	{'v', "verbose", false},
	{'h', "help", false},
	{'i', "license", false},
	{'V', "version", false},
	{'P', "pidfile", true},
	{'f', "slab-growth-factor", true},
	{'n', "slab-min-size", true},
	{'L', "enable-largepages", false},
	{'D', "", true},
	{'t', "threads", true},
	{'R', "max-reqs-per-event", true},
	{'C', "disable-cas", false},
	{'b', "listen-backlog", true},
	{'B', "protocol", true},
	{'I', "max-item-size", true},
	{'S', "enable-sasl", false},
	{'F', "disable-flush-all", false},
	{'X', "disable-dumping", false},
	{'W', "disable-watch", false},
	{'Y', "auth-file", true},
	{'e', "memory-file", true},
	{'Z', "enable-ssl", false},
	{'o', "extended", true},
	{'N', "napi-ids", true},
	{optVBuckets, "vbuckets", true},
	{optParkTimeout, "pending-timeout", true},
	{optStreamLog, "stream-log-bytes", true},
	{optSyncReplication, "sync-replication", false},
	{optClusterAuth, "cluster-auth", true},
	{optInsecureCluster, "insecure-cluster", false},
	{optMetricsListen, "metrics-listen", true},
}

// Codes for long-only options (vbcache's own; memcached has none). They
// are control bytes, so no short flag can name them.
const (
	optVBuckets        byte = 1 + iota // --vbuckets N: cluster mode
	optParkTimeout                     // --pending-timeout D: how long a request waits on a pending vbucket
	optStreamLog                       // --stream-log-bytes N: mutation ring per streamed vbucket
	optSyncReplication                 // --sync-replication: answer writes once the replicas have them
	optClusterAuth                     // --cluster-auth FILE: the cluster administrator's user:password
	optInsecureCluster                 // --insecure-cluster: serve control requests from anyone
	optMetricsListen                   // --metrics-listen ADDR: serve Prometheus metrics over HTTP
)

// longAliases are extra long names memcached's help shows or older
// versions used.
var longAliases = map[string]byte{
	"napi_ids": 'N',
}

func findShort(c byte) (option, bool) {
	for _, o := range options {
		if o.short == c && c > ' ' {
			return o, true
		}
	}
	return option{}, false
}

// findLong resolves a long name as getopt_long does: an exact match, or
// else a prefix shared by exactly one option.
func findLong(name string) (option, error) {
	if c, ok := longAliases[name]; ok {
		o, _ := findShort(c)
		return o, nil
	}
	var matches []option
	for _, o := range options {
		if o.long == "" {
			continue
		}
		if o.long == name {
			return o, nil
		}
		if strings.HasPrefix(o.long, name) {
			matches = append(matches, o)
		}
	}
	switch len(matches) {
	case 0:
		return option{}, fail(ExitFailure, "vbcache server: unrecognized option '--%s'", name)
	case 1:
		return matches[0], nil
	}
	names := make([]string, len(matches))
	for i, m := range matches {
		names[i] = "'--" + m.long + "'"
	}
	return option{}, fail(ExitFailure, "vbcache server: option '--%s' is ambiguous; possibilities: %s",
		name, strings.Join(names, " "))
}
