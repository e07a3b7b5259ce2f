package cmdline

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/vbcache/vbcache/internal/server"
)

// Parse reads memcached-style flags into Options. getenv supplies the
// environment (MEMCACHED_PORT_FILENAME, MEMCACHED_SASL_PWDB, and vbcache's
// VBCACHE_NOLOOP=1, Config.NoEventLoops, for comparisons). It stops at
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
	o.Config.NoEventLoops = getenv("VBCACHE_NOLOOP") != ""
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
	case optClusterAuth:
		o.clusterAuth = val
	case optInsecureCluster:
		c.InsecureCluster = true
	case optMetricsListen:
		if _, _, err := net.SplitHostPort(val); err != nil {
			return illegal(flagName(opt), val, "host:port, such as 127.0.0.1:9150 or :9150")
		}
		o.MetricsListen = val
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
