package cmdline

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

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
}

// Codes for long-only options (vbcache's own; memcached has none). They
// are control bytes, so no short flag can name them.
const (
	optVBuckets        byte = 1 + iota // --vbuckets N: cluster mode
	optParkTimeout                     // --pending-timeout D: how long a request waits on a pending vbucket
	optStreamLog                       // --stream-log-bytes N: mutation ring per streamed vbucket
	optSyncReplication                 // --sync-replication: answer writes once the replicas have them
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

// Parse reads memcached-style flags into Options. getenv supplies the
// environment (MEMCACHED_PORT_FILENAME, MEMCACHED_SASL_PWDB). It stops at
// the first -h, -V or -i, as memcached does, returning that Action. The
// returned error is an *ExitError. For ActionRun the caller prints
// Warnings and then calls Finish.
func Parse(args []string, getenv func(string) string) (*Options, error) {
	o := &Options{Action: ActionRun}
	o.Config.MaxConnsFast = true
	o.Config.LRUCrawler = true
	o.Config.SlabReassign = true
	o.lruMaintain = true
	o.Config.PortFile = getenv("MEMCACHED_PORT_FILENAME")
	o.saslPWDB = getenv(saslPWDBEnv)

	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				return nil, fail(ExitUsage, "vbcache server: unexpected argument %q", args[i+1])
			}
			break
		}
		if len(a) < 2 || a[0] != '-' {
			// GNU getopt would set these aside and memcached ignore
			// them; they are always a mistake, so say so.
			return nil, fail(ExitUsage, "vbcache server: unexpected argument %q", a)
		}
		if a[1] == '-' { // --name[=value]
			name, val, hasVal := strings.Cut(a[2:], "=")
			opt, err := findLong(name)
			if err != nil {
				return nil, err
			}
			switch {
			case opt.arg && !hasVal:
				if i+1 >= len(args) {
					return nil, fail(ExitFailure, "vbcache server: option '--%s' requires an argument", opt.long)
				}
				i++
				val = args[i]
			case !opt.arg && hasVal && opt.short != 'v':
				// memcached declares --verbose with an optional
				// argument that it ignores.
				return nil, fail(ExitFailure, "vbcache server: option '--%s' doesn't allow an argument", opt.long)
			}
			if err := o.apply(opt, val); err != nil {
				return nil, err
			}
			if o.Action != ActionRun {
				return o, nil
			}
			continue
		}
		for j := 1; j < len(a); j++ { // -abc, -p11211, -p 11211
			opt, ok := findShort(a[j])
			if !ok {
				return nil, fail(ExitFailure, "vbcache server: invalid option -- '%c'", a[j])
			}
			val := ""
			if opt.arg {
				if j+1 < len(a) {
					val = a[j+1:]
				} else if i+1 < len(args) {
					i++
					val = args[i]
				} else {
					return nil, fail(ExitFailure, "vbcache server: option requires an argument -- '%c'", opt.short)
				}
			}
			if err := o.apply(opt, val); err != nil {
				return nil, err
			}
			if o.Action != ActionRun {
				return o, nil
			}
			if opt.arg {
				break
			}
		}
	}
	return o, nil
}

// flagName names an option in messages: "-c" or "-c (--conn-limit)".
func flagName(opt option) string {
	if opt.long == "" {
		return "-" + string(opt.short)
	}
	if opt.short <= ' ' {
		return "--" + opt.long
	}
	return fmt.Sprintf("-%c (--%s)", opt.short, opt.long)
}

func illegal(what, val, want string) error {
	return fail(ExitFailure, "vbcache: illegal value %q for %s (want %s)", val, what, want)
}

// parseInt reads a decimal integer, allowing surrounding blanks as atoi
// does, and refusing anything else.
func parseInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n, err == nil
}

func (o *Options) intArg(opt option, val string) (int, error) {
	n, ok := parseInt(val)
	if !ok || n > math.MaxInt32 || n < math.MinInt32 {
		return 0, illegal(flagName(opt), val, "an integer")
	}
	return int(n), nil
}

// apply records one flag. The checks made here are those memcached makes
// inside its getopt loop.
func (o *Options) apply(opt option, val string) error {
	c := &o.Config
	switch opt.short {
	case 'h':
		o.Action = ActionHelp
	case 'V':
		o.Action = ActionVersion
	case 'i':
		o.Action = ActionLicense
	case 'A':
		c.EnableShutdown = true
	case optVBuckets:
		n, ok := parseInt(val)
		if !ok || n < 0 || n > 65536 || n&(n-1) != 0 {
			return illegal(flagName(opt), val, "a power of two from 1 to 65536, or 0 for standalone")
		}
		c.VBuckets = int(n)
	case optParkTimeout:
		d, err := time.ParseDuration(val)
		if err != nil || d <= 0 {
			return illegal(flagName(opt), val, "a positive duration such as 1s or 250ms")
		}
		c.VBucketParkTimeout = d
	case optSyncReplication:
		c.SyncReplication = true
	case optStreamLog:
		n, ok := parseInt(val)
		if !ok || n < 64<<10 || n > 1<<30 {
			return illegal(flagName(opt), val, "a byte count from 65536 to 1073741824")
		}
		c.StreamLogBytes = int(n)
	case 'a':
		m, err := strconv.ParseUint(strings.TrimSpace(val), 8, 32)
		if err != nil {
			return illegal(flagName(opt), val, "an octal mask such as 700")
		}
		c.UnixMask = uint32(m)
	case 'U':
		n, err := o.intArg(opt, val)
		if err != nil {
			return err
		}
		c.UDPPort, o.udpSet = n, true
	case 'p':
		n, err := o.intArg(opt, val)
		if err != nil {
			return err
		}
		c.Port, c.PortSet, o.tcpSet = n, true, true
	case 's':
		c.UnixSocket = val
	case 'm':
		n, ok := parseMegabytes(val)
		if !ok {
			return illegal(flagName(opt), val, "a number of megabytes, or with a g suffix gigabytes")
		}
		o.memSet, o.memMB = true, n
	case 'M':
		c.Store.NoEvict = true
	case 'c':
		n, err := o.intArg(opt, val)
		if err != nil {
			return err
		}
		if n <= 0 {
			return fail(ExitFailure, "Maximum connections must be greater than 0")
		}
		c.MaxConns = n
	case 'k':
		o.LockMemory = true
	case 'v':
		c.Verbose++
	case 'l':
		for _, l := range strings.FieldsFunc(val, func(r rune) bool { return r == ',' || r == ';' }) {
			if !contains(o.listenRaw, l) {
				o.listenRaw = append(o.listenRaw, l)
			}
		}
		c.Listen = o.listenRaw
	case 'd':
		o.Daemonize = true
	case 'r':
		o.CoreDumps = true
	case 'R':
		n, err := o.intArg(opt, val)
		if err != nil {
			return err
		}
		if n <= 0 { // memcached checks only == 0 and then misbehaves
			return fail(ExitFailure, "Number of requests per event must be greater than 0")
		}
		c.ReqsPerEvent = n
	case 'u':
		o.User = val
	case 'P':
		o.PIDFile = val
	case 'e':
		return fail(ExitUsage, "vbcache: -e (restartable memory file) is not supported")
	case 'f':
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return illegal(flagName(opt), val, "a number")
		}
		if f <= 1.0 {
			return fail(ExitFailure, "Factor must be greater than 1")
		}
		c.Store.GrowthFactor = f
	case 'n':
		n, err := o.intArg(opt, val)
		if err != nil {
			return err
		}
		if n <= 0 { // memcached checks only == 0
			return fail(ExitFailure, "Chunk size must be greater than 0")
		}
		c.Store.ChunkSizeMin = n
	case 't':
		n, err := o.intArg(opt, val)
		if err != nil {
			return err
		}
		if n <= 0 {
			return fail(ExitFailure, "Number of threads must be greater than 0")
		}
		if n > 64 {
			o.Warnings = append(o.Warnings, "WARNING: Setting a high number of worker"+
				"threads is not recommended.\n"+
				" Set this value to the number of cores in your machine or less.")
		}
		c.Threads = n
	case 'D':
		if val == "" {
			return fail(ExitFailure, "No delimiter specified")
		}
		c.PrefixDelim = val[0]
		c.DetailEnabled = true
	case 'L':
		o.LargePages = true
	case 'C':
		c.Store.DisableCAS = true
	case 'b':
		n, err := o.intArg(opt, val)
		if err != nil {
			return err
		}
		c.Backlog = n
	case 'B':
		o.protoSet = true
		switch val {
		case "auto":
			c.Protocol = server.ProtoAuto
		case "binary":
			c.Protocol = server.ProtoBinary
		case "ascii":
			c.Protocol = server.ProtoASCII
		default:
			return fail(ExitUsage, "Invalid value for binding protocol: %s\n"+
				" -- should be one of auto, binary, or ascii", val)
		}
	case 'I':
		n, ok := parseSize(val)
		if !ok {
			return illegal(flagName(opt), val, "a size in bytes with an optional k or m suffix")
		}
		o.itemSizeSet, o.itemSize = true, n
	case 'S':
		c.SASL = true
	case 'F':
		c.DisableFlush = true
	case 'X':
		c.DisableDumps = true
	case 'W':
		c.DisableWatch = true
	case 'Y':
		o.authFile = val
	case 'Z':
		o.tlsEnabled = true
	case 'N':
		n, err := o.intArg(opt, val)
		if err != nil {
			return err
		}
		if n <= 0 {
			return fail(ExitFailure, "Maximum number of NAPI IDs must be greater than 0")
		}
		o.napiIDs = n
	case 'o':
		return o.applyExtended(val)
	default:
		panic(fmt.Sprintf("vbcache: flag -%c in the table but not handled", opt.short))
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// parseMegabytes reads -m's value: megabytes, optionally written with an
// m/M suffix, or gigabytes with g/G (memcached takes only a plain number).
func parseMegabytes(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'm', 'M':
			s = s[:len(s)-1]
		case 'g', 'G':
			mult, s = 1<<10, s[:len(s)-1]
		}
	}
	n, ok := parseInt(s)
	if !ok || n > (math.MaxInt64>>30) || n < -(math.MaxInt64>>30) {
		return 0, false
	}
	return n * mult, true
}

// parseSize reads -I's value: a byte count with an optional k/K or m/M
// suffix (memcached takes no other suffix).
func parseSize(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'k', 'K':
			mult, s = 1<<10, s[:len(s)-1]
		case 'm', 'M':
			mult, s = 1<<20, s[:len(s)-1]
		}
	}
	n, ok := parseInt(s)
	if !ok || n > math.MaxInt32 || n < math.MinInt32 {
		return 0, false
	}
	return n * mult, true
}

// applyExtended reads -o's comma-separated key[=value] list, in order,
// like glibc's getsubopt loop in memcached: an empty item in the middle of
// the list is an illegal suboption, a trailing comma is not.
func (o *Options) applyExtended(list string) error {
	for list != "" {
		item, rest, _ := strings.Cut(list, ",")
		list = rest
		key, val, hasVal := strings.Cut(item, "=")
		if err := o.applySubopt(item, key, val, hasVal); err != nil {
			return err
		}
	}
	return nil
}

// applySubopt applies one -o item. The messages and their exit status
// (1) are memcached's.
func (o *Options) applySubopt(item, key, val string, hasVal bool) error {
	c := &o.Config
	s := &c.Store
	missing := func(format string) error {
		if hasVal {
			return nil
		}
		return fail(ExitFailure, format, key)
	}
	num := func() (int, error) {
		n, ok := parseInt(val)
		if !ok || n > math.MaxInt32 || n < math.MinInt32 {
			return 0, illegal("-o "+key, val, "an integer")
		}
		return int(n), nil
	}
	unsigned := func() (uint64, error) {
		n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 32)
		if err != nil {
			return 0, fail(ExitFailure, "could not parse argument to %s", key)
		}
		return n, nil
	}
	float := func() (float64, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, illegal("-o "+key, val, "a number")
		}
		return f, nil
	}

	switch key {
	case "maxconns_fast":
		c.MaxConnsFast = true
	case "no_maxconns_fast":
		c.MaxConnsFast = false
	case "hashpower":
		if err := missing("Missing numeric argument for %s"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 12 {
			return fail(ExitFailure, "Initial hashtable multiplier of %d is too low", n)
		}
		if n > 32 {
			return fail(ExitFailure, "Initial hashtable multiplier of %d is too high\n"+
				"Choose a value based on \"STAT hash_power_level\" from a running instance", n)
		}
		s.HashPower = n
	case "no_hashexpand":
		// vbcache's index grows per shard; nothing to switch off.
	case "slab_reassign":
		c.SlabReassign, s.NoSlabReassign = true, false
	case "no_slab_reassign":
		c.SlabReassign, s.NoSlabReassign = false, true
	case "slab_automove":
		if hasVal {
			n, err := num()
			if err != nil {
				return err
			}
			if n < 0 || n > 2 {
				return fail(ExitFailure, "slab_automove must be between 0 and 2")
			}
		}
	case "no_slab_automove":
	case "slab_automove_ratio":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		f, err := float()
		if err != nil {
			return err
		}
		if f <= 0 || f > 1 {
			return fail(ExitFailure, "slab_automove_ratio must be > 0 and < 1")
		}
	case "slab_automove_window":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 3 {
			return fail(ExitFailure, "slab_automove_window must be > 2")
		}
	case "slab_automove_freeratio": // an extstore tuning; harmless
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		if _, err := float(); err != nil {
			return err
		}
	case "tail_repair_time":
		if err := missing("Missing numeric argument for %s"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 10 {
			return fail(ExitFailure, "Cannot set tail_repair_time to less than 10 seconds")
		}
	case "hash_algorithm":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		switch val {
		case "jenkins", "murmur3", "xxh3":
			o.hashAlgo = val
		default:
			return fail(ExitFailure, "Unknown hash_algorithm option (jenkins, murmur3, xxh3)")
		}
	case "lru_crawler":
		c.LRUCrawler = true
	case "no_lru_crawler":
		c.LRUCrawler = false
	case "lru_crawler_sleep":
		if err := missing("Missing %s value"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n > 1000000 || n < 0 {
			return fail(ExitFailure, "LRU crawler sleep must be between 0 and 1 second")
		}
	case "lru_crawler_tocrawl":
		if err := missing("Missing %s value"); err != nil {
			return err
		}
		if _, err := strconv.ParseUint(strings.TrimSpace(val), 10, 32); err != nil {
			return fail(ExitFailure, "lru_crawler_tocrawl takes a numeric 32bit value")
		}
	case "lru_maintainer":
		o.lruMaintain, s.FlatLRU, c.NoLRUMaintainer = true, false, false
	case "no_lru_maintainer":
		o.lruMaintain, s.FlatLRU, c.NoLRUMaintainer = false, true, true
	case "hot_lru_pct", "warm_lru_pct":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 1 || n >= 80 {
			return fail(ExitFailure, "%s must be > 1 and < 80", key)
		}
		if key == "hot_lru_pct" {
			s.HotLRUPct = n
		} else {
			s.WarmLRUPct = n
		}
	case "hot_max_factor", "warm_max_factor":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		f, err := float()
		if err != nil {
			return err
		}
		if f <= 0 {
			return fail(ExitFailure, "%s must be > 0", key)
		}
	case "temporary_ttl":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		if _, err := num(); err != nil {
			return err
		}
		o.tempTTLSet = true
	case "idle_timeout":
		if err := missing("Missing numeric argument for %s"); err != nil {
			return err
		}
		n, err := num()
		if err != nil {
			return err
		}
		if n < 0 {
			return illegal("-o "+key, val, "a number of seconds")
		}
		c.IdleTimeout = time.Duration(n) * time.Second
	case "watcher_logbuf_size", "worker_logbuf_size", "read_buf_mem_limit":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		if _, err := unsigned(); err != nil {
			return err
		}
	case "resp_obj_mem_limit":
		o.Warnings = append(o.Warnings, "DEPRECATED: resp_obj_mem_limit no longer used. See read_buf_mem_limit,")
	case "slab_sizes":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		v := val
		o.slabSizesRaw = &v
	case "slab_chunk_max":
		if err := missing("Missing %s argument"); err != nil {
			return err
		}
		n, ok := parseInt(val)
		if !ok || n > math.MaxInt32 || n < math.MinInt32 {
			return fail(ExitFailure, "could not parse argument to slab_chunk_max")
		}
		if n <= 0 {
			return fail(ExitFailure, "slab_chunk_max must be greater than 0")
		}
		// memcached 1.6.18's -h says kilobytes, but it reads bytes.
		s.SlabChunkMax, o.chunkMaxSet = int(n), true
	case "no_hugepages":
		s.NoHugePages = true
	case "no_chunked_items":
		s.SlabChunkMax = 1 << 20 // the slab page size
	case "track_sizes":
		c.TrackSizes = true
	case "modern", "inline_ascii_resp", "no_inline_ascii_resp",
		"drop_privileges", "no_drop_privileges", "relaxed_privileges":
		// modern is a no-op in memcached too; vbcache always answers
		// inline and has no seccomp sandbox to drop privileges into.
	case "no_modern":
		if !o.chunkMaxSet {
			s.SlabChunkMax = 1 << 20
		}
		c.SlabReassign, s.NoSlabReassign = false, true
		c.MaxConnsFast = false
		s.FlatLRU, o.lruMaintain, c.NoLRUMaintainer = true, false, true
		c.LRUCrawler = false
		o.hashAlgo = "jenkins"
	case "sock_cookie_id":
		// Linux SO_MARK for firewalls; accepted and ignored.
	default:
		if ok, err := o.applySSLSubopt(key, val, hasVal); ok {
			return err
		}
		switch {
		case strings.HasPrefix(key, "ext_"):
			return fail(ExitUsage, "vbcache: -o %s (extstore) is not supported", key)
		case strings.HasPrefix(key, "proxy_"):
			return fail(ExitUsage, "vbcache: -o %s (memcached's built-in proxy) is not supported", key)
		}
		return fail(ExitFailure, "Illegal suboption \"%s\"", item)
	}
	return nil
}

// Finish applies what memcached decides after reading all flags (UDP port
// standing in for the TCP port, -m and -I in bytes, the chunk size for
// large items, slab_sizes, temporary_ttl, -S forcing the binary
// protocol), in memcached's order, leaves the rest to Config.Validate, and
// then reads the TLS certificates and credential files.
func (o *Options) Finish() error {
	c := &o.Config
	s := &c.Store
	if o.napiIDs > 0 {
		threads := c.Threads
		if threads == 0 {
			threads = 4
		}
		if o.napiIDs > threads {
			return fail(ExitUsage, "Number of napi_ids(%d) cannot be greater than number of threads(%d)",
				o.napiIDs, threads)
		}
	}
	if o.itemSizeSet {
		if o.itemSize < 1024 {
			return fail(ExitUsage, "Item max size cannot be less than 1024 bytes.")
		}
		s.ItemSizeMax = int(o.itemSize)
	}
	if o.memSet {
		if o.memMB <= 0 {
			// memcached: 0 (or garbage) leaves no room for any item.
			return fail(ExitUsage, "Cannot set item size limit higher than 1/2 of memory max.")
		}
		s.MaxBytes = o.memMB << 20
	}
	if s.ItemSizeMax > 1<<20 && !o.chunkMaxSet {
		s.SlabChunkMax = 0 // the default, half a page, even after no_modern
	}
	if o.udpSet && c.UDPPort != 0 && !o.tcpSet {
		c.Port, c.PortSet = c.UDPPort, true
	}
	var d server.Config = *c
	d.SetDefaults()
	// The item size checks come before slab_sizes in memcached.
	if err := checkItemSize(&d); err != nil {
		return err
	}
	if o.slabSizesRaw != nil {
		sizes, err := parseSlabSizes(*o.slabSizesRaw, d.Store.ChunkSizeMin, d.Store.SlabChunkMax)
		if err != nil {
			return err
		}
		o.slabSizes = sizes
	}
	if d.Store.HotLRUPct+d.Store.WarmLRUPct > 80 {
		return fail(ExitUsage, "hot_lru_pct + warm_lru_pct cannot be more than 80%% combined")
	}
	if o.tempTTLSet && !o.lruMaintain {
		return fail(ExitUsage, "temporary_ttl requires lru_maintainer to be enabled")
	}
	if err := o.checkSASLProtocol(); err != nil {
		return err
	}
	if err := o.checkAuthFileProtocol(); err != nil {
		return err
	}
	err := c.Validate()
	if err != nil && !errors.Is(err, server.ErrListenAddr) {
		return &ExitError{Code: ExitUsage, Msg: err.Error()}
	}
	// memcached finds bad -l entries when it binds, after it has loaded
	// the certificates and the auth file; and a "notls:" entry is only
	// valid once TLS is on, so the listen check is repeated then.
	if err := o.finishSecurity(); err != nil {
		return err
	}
	if err != nil {
		if err := c.Validate(); err != nil {
			code := ExitUsage
			if errors.Is(err, server.ErrListenAddr) {
				code = ExitOSErr
			}
			return &ExitError{Code: code, Msg: err.Error()}
		}
	}
	return nil
}

// checkItemSize runs just the -I checks of Validate, so that they are
// reported before slab_sizes problems as memcached does.
func checkItemSize(d *server.Config) error {
	probe := server.Config{Store: d.Store}
	probe.Store.HotLRUPct, probe.Store.WarmLRUPct = 0, 0
	probe.Store.HashPower = 0
	if err := probe.Validate(); err != nil {
		return &ExitError{Code: ExitUsage, Msg: err.Error()}
	}
	return nil
}

// parseSlabSizes checks -o slab_sizes=a-b-c as memcached's
// _parse_slab_sizes does. vbcache's store derives its classes from -f and
// -n, so the list is only checked.
func parseSlabSizes(list string, minSize, maxSize int) ([]int, error) {
	const chunkAlign = 8
	if list == "" {
		return nil, fail(ExitUsage, "slab size 0 is out of valid range")
	}
	var sizes []int
	last := 0
	for _, p := range strings.FieldsFunc(list, func(r rune) bool { return r == '-' }) {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 32)
		size := int(n)
		if err != nil || size < minSize || size > maxSize {
			return nil, fail(ExitUsage, "slab size %d is out of valid range", size)
		}
		if last >= size {
			return nil, fail(ExitUsage, "slab size %d cannot be lower than or equal to a previous class size", size)
		}
		if size <= last+chunkAlign {
			return nil, fail(ExitUsage, "slab size %d must be at least %d bytes larger than previous class", size, chunkAlign)
		}
		sizes = append(sizes, size)
		last = size
		if len(sizes) >= 63 { // MAX_NUMBER_OF_SLAB_CLASSES-1
			return nil, fail(ExitUsage, "too many slab classes specified")
		}
	}
	return sizes, nil
}
