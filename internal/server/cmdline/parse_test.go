package cmdline

import (
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/server"
)

// parse runs the flag parser and the post-flag checks as runServer does,
// with env as the environment.
func parse(args []string, env map[string]string) (*Options, error) {
	o, err := Parse(args, func(k string) string { return env[k] })
	if err != nil {
		return nil, err
	}
	if o.Action != ActionRun {
		return o, nil
	}
	if err := o.Finish(); err != nil {
		return nil, err
	}
	return o, nil
}

func TestServerFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  string
		check func(t *testing.T, o *Options)
	}{
		{"defaults", "", func(t *testing.T, o *Options) {
			c := o.Config
			if c.Port != 0 || c.PortSet || c.UDPPort != 0 || c.MaxConns != 0 || c.Threads != 0 {
				t.Errorf("zero config expected, got %+v", c)
			}
			if !c.MaxConnsFast || !c.LRUCrawler || !c.SlabReassign || c.Store.FlatLRU || c.Store.NoSlabReassign {
				t.Errorf("modern defaults not on: %+v", c)
			}
			c.SetDefaults()
			if c.Port != 11211 || c.MaxConns != 1024 || c.Threads != 4 || c.ReqsPerEvent != 20 ||
				c.Backlog != 1024 || c.Store.MaxBytes != 64<<20 || c.Store.ItemSizeMax != 1<<20 ||
				c.Store.GrowthFactor != 1.25 || c.Store.ChunkSizeMin != 48 || c.Store.HotLRUPct != 20 ||
				c.Store.WarmLRUPct != 40 || c.Store.SlabPageSize != 1<<20 || c.Store.SlabChunkMax != 512<<10 ||
				c.Protocol != server.ProtoAuto || c.UnixMask != 0o700 || c.PrefixDelim != ':' {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{"separate values", "-p 11311 -U 11312 -c 10 -t 8 -m 128 -R 5 -b 64 -n 32 -f 1.5", func(t *testing.T, o *Options) {
			c := o.Config
			if c.Port != 11311 || !c.PortSet || c.UDPPort != 11312 || c.MaxConns != 10 || c.Threads != 8 ||
				c.Store.MaxBytes != 128<<20 || c.ReqsPerEvent != 5 || c.Backlog != 64 ||
				c.Store.ChunkSizeMin != 32 || c.Store.GrowthFactor != 1.5 {
				t.Errorf("got %+v", c)
			}
		}},
		{"attached values", "-p11311 -c10 -t8 -m128 -I2m", func(t *testing.T, o *Options) {
			c := o.Config
			if c.Port != 11311 || c.MaxConns != 10 || c.Threads != 8 || c.Store.MaxBytes != 128<<20 ||
				c.Store.ItemSizeMax != 2<<20 {
				t.Errorf("got %+v", c)
			}
		}},
		{"combined short flags", "-vvAMCFXW", func(t *testing.T, o *Options) {
			c := o.Config
			if c.Verbose != 2 || !c.EnableShutdown || !c.Store.NoEvict || !c.Store.DisableCAS ||
				!c.DisableFlush || !c.DisableDumps || !c.DisableWatch {
				t.Errorf("got %+v", c)
			}
		}},
		{"combined with value at the end", "-vvp 1234", func(t *testing.T, o *Options) {
			if o.Config.Verbose != 2 || o.Config.Port != 1234 {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"combined with attached value", "-vp1234", func(t *testing.T, o *Options) {
			if o.Config.Verbose != 1 || o.Config.Port != 1234 {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"vvv", "-vvv -v", func(t *testing.T, o *Options) {
			if o.Config.Verbose != 4 {
				t.Errorf("verbose %d", o.Config.Verbose)
			}
		}},
		{"long names", "--port=1 --udp-port 2 --listen=127.0.0.1 --memory-limit=100 --conn-limit=9 --threads=3 " +
			"--max-item-size=4m --enable-shutdown --disable-cas --disable-evictions --disable-flush-all " +
			"--protocol=ascii --verbose --verbose=1 --listen-backlog=7 --max-reqs-per-event=3 " +
			"--slab-growth-factor=2 --slab-min-size=64 --disable-dumping --disable-watch --extended=track_sizes",
			func(t *testing.T, o *Options) {
				c := o.Config
				if c.Port != 1 || c.UDPPort != 2 || len(c.Listen) != 1 || c.Listen[0] != "127.0.0.1" ||
					c.Store.MaxBytes != 100<<20 || c.MaxConns != 9 || c.Threads != 3 ||
					c.Store.ItemSizeMax != 4<<20 || !c.EnableShutdown || !c.Store.DisableCAS ||
					!c.Store.NoEvict || !c.DisableFlush || c.Protocol != server.ProtoASCII || c.Verbose != 2 ||
					c.Backlog != 7 || c.ReqsPerEvent != 3 || c.Store.GrowthFactor != 2 ||
					c.Store.ChunkSizeMin != 64 || !c.DisableDumps || !c.DisableWatch || !c.TrackSizes {
					t.Errorf("got %+v", c)
				}
			}},
		{"long name prefix", "--memory-l=10 --conn 5", func(t *testing.T, o *Options) {
			if o.Config.Store.MaxBytes != 10<<20 || o.Config.MaxConns != 5 {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"process flags", "-d -P /tmp/x.pid -u nobody -k -r -L --daemon", func(t *testing.T, o *Options) {
			if !o.Daemonize || o.PIDFile != "/tmp/x.pid" || o.User != "nobody" || !o.LockMemory || !o.CoreDumps || !o.LargePages {
				t.Errorf("got %+v", o)
			}
		}},
		{"item size suffixes", "-I 512k", func(t *testing.T, o *Options) {
			if o.Config.Store.ItemSizeMax != 512<<10 {
				t.Errorf("got %d", o.Config.Store.ItemSizeMax)
			}
		}},
		{"item size upper-case suffix", "-I 2M", func(t *testing.T, o *Options) {
			if o.Config.Store.ItemSizeMax != 2<<20 || o.Config.Store.SlabChunkMax != 0 {
				t.Errorf("got %+v", o.Config.Store)
			}
		}},
		{"item size in bytes", "-I 1048576", func(t *testing.T, o *Options) {
			if o.Config.Store.ItemSizeMax != 1<<20 {
				t.Errorf("got %d", o.Config.Store.ItemSizeMax)
			}
		}},
		{"item size 1024m", "-I 1024m -m 4096", func(t *testing.T, o *Options) {
			if o.Config.Store.ItemSizeMax != 1<<30 {
				t.Errorf("got %d", o.Config.Store.ItemSizeMax)
			}
		}},
		{"memory in gigabytes", "-m 2g", func(t *testing.T, o *Options) {
			if o.Config.Store.MaxBytes != 2<<30 {
				t.Errorf("got %d", o.Config.Store.MaxBytes)
			}
		}},
		{"unix socket", "-s /tmp/mc.sock -a 755", func(t *testing.T, o *Options) {
			if o.Config.UnixSocket != "/tmp/mc.sock" || o.Config.UnixMask != 0o755 {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"listen list", "-l 127.0.0.1,::1 -l [::1]:11300 -l 127.0.0.1", func(t *testing.T, o *Options) {
			want := []string{"127.0.0.1", "::1", "[::1]:11300"}
			if strings.Join(o.Config.Listen, " ") != strings.Join(want, " ") {
				t.Errorf("got %q", o.Config.Listen)
			}
		}},
		{"listen with port and localhost", "-l localhost:11400", func(t *testing.T, o *Options) {
			if len(o.Config.Listen) != 1 {
				t.Errorf("got %q", o.Config.Listen)
			}
		}},
		{"udp port stands in for tcp port", "-U 11500", func(t *testing.T, o *Options) {
			if o.Config.Port != 11500 || !o.Config.PortSet || o.Config.UDPPort != 11500 {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"udp port with tcp port", "-p 1 -U 2", func(t *testing.T, o *Options) {
			if o.Config.Port != 1 || o.Config.UDPPort != 2 {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"tcp off", "-p 0", func(t *testing.T, o *Options) {
			if o.Config.Port != 0 || !o.Config.PortSet {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"ephemeral port", "-p -1", func(t *testing.T, o *Options) {
			if o.Config.Port != -1 {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"protocols", "-B binary", func(t *testing.T, o *Options) {
			if o.Config.Protocol != server.ProtoBinary {
				t.Errorf("got %v", o.Config.Protocol)
			}
		}},
		{"prefix delimiter", "-D /", func(t *testing.T, o *Options) {
			if o.Config.PrefixDelim != '/' || !o.Config.DetailEnabled {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"no_modern", "-o no_modern", func(t *testing.T, o *Options) {
			c := o.Config
			if !c.Store.FlatLRU || c.SlabReassign || !c.Store.NoSlabReassign || c.MaxConnsFast ||
				c.LRUCrawler || c.Store.SlabChunkMax != 1<<20 {
				t.Errorf("got %+v", c)
			}
		}},
		{"no_modern then lru_crawler", "-o no_modern,lru_crawler,slab_reassign", func(t *testing.T, o *Options) {
			if !o.Config.LRUCrawler || !o.Config.SlabReassign || o.Config.Store.NoSlabReassign {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"no_modern with big items keeps half-page chunks", "-o no_modern -I 2m", func(t *testing.T, o *Options) {
			if o.Config.Store.SlabChunkMax != 0 {
				t.Errorf("chunk max %d", o.Config.Store.SlabChunkMax)
			}
		}},
		{"modern toggles", "-o no_maxconns_fast,no_lru_crawler,no_slab_reassign,no_lru_maintainer,track_sizes",
			func(t *testing.T, o *Options) {
				c := o.Config
				if c.MaxConnsFast || c.LRUCrawler || c.SlabReassign || !c.Store.NoSlabReassign || !c.Store.FlatLRU || !c.TrackSizes {
					t.Errorf("got %+v", c)
				}
			}},
		{"no huge pages", "-o no_hugepages", func(t *testing.T, o *Options) {
			if !o.Config.Store.NoHugePages {
				t.Errorf("got %+v", o.Config.Store)
			}
		}},
		{"lru percentages", "-o hot_lru_pct=30,warm_lru_pct=50", func(t *testing.T, o *Options) {
			if o.Config.Store.HotLRUPct != 30 || o.Config.Store.WarmLRUPct != 50 {
				t.Errorf("got %+v", o.Config.Store)
			}
		}},
		{"hashpower and idle timeout", "-o hashpower=20 -o idle_timeout=30", func(t *testing.T, o *Options) {
			if o.Config.Store.HashPower != 20 || o.Config.IdleTimeout != 30*time.Second {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"slab_chunk_max in bytes", "-o slab_chunk_max=262144", func(t *testing.T, o *Options) {
			if o.Config.Store.SlabChunkMax != 256<<10 {
				t.Errorf("got %d", o.Config.Store.SlabChunkMax)
			}
		}},
		{"slab_chunk_max kept for big items", "-o slab_chunk_max=262144 -I 4m", func(t *testing.T, o *Options) {
			if o.Config.Store.SlabChunkMax != 256<<10 {
				t.Errorf("got %d", o.Config.Store.SlabChunkMax)
			}
		}},
		{"no_chunked_items", "-o no_chunked_items", func(t *testing.T, o *Options) {
			if o.Config.Store.SlabChunkMax != 1<<20 {
				t.Errorf("got %d", o.Config.Store.SlabChunkMax)
			}
		}},
		{"accepted and ignored sub-options", "-o modern,lru_maintainer,lru_crawler_sleep=100,lru_crawler_tocrawl=5," +
			"hot_max_factor=0.2,warm_max_factor=2.0,temporary_ttl=61,slab_automove,slab_automove=2,no_slab_automove," +
			"slab_automove_ratio=0.8,slab_automove_window=30,hash_algorithm=xxh3,no_hashexpand,tail_repair_time=60," +
			"watcher_logbuf_size=256,worker_logbuf_size=64,read_buf_mem_limit=0,drop_privileges,no_drop_privileges," +
			"inline_ascii_resp,no_inline_ascii_resp,sock_cookie_id=1,maxconns_fast,relaxed_privileges," +
			"slab_sizes=96-120-152,",
			func(t *testing.T, o *Options) {
				if o.hashAlgo != "xxh3" || len(o.slabSizes) != 3 {
					t.Errorf("got %+v", o)
				}
			}},
		{"deprecated resp_obj_mem_limit warns", "-o resp_obj_mem_limit=5", func(t *testing.T, o *Options) {
			if len(o.Warnings) != 1 || !strings.HasPrefix(o.Warnings[0], "DEPRECATED: resp_obj_mem_limit") {
				t.Errorf("warnings %q", o.Warnings)
			}
		}},
		{"many threads warn", "-t 65", func(t *testing.T, o *Options) {
			if len(o.Warnings) != 1 || !strings.HasPrefix(o.Warnings[0], "WARNING: Setting a high number of worker") {
				t.Errorf("warnings %q", o.Warnings)
			}
		}},
		{"empty -o", "-o ''", nil},
		{"double dash ends flags", "-v --", func(t *testing.T, o *Options) {
			if o.Config.Verbose != 1 {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"help stops at once", "-h -c 0", func(t *testing.T, o *Options) {
			if o.Action != ActionHelp {
				t.Errorf("action %v", o.Action)
			}
		}},
		{"version", "-V", func(t *testing.T, o *Options) {
			if o.Action != ActionVersion {
				t.Errorf("action %v", o.Action)
			}
		}},
		{"long version", "--version", func(t *testing.T, o *Options) {
			if o.Action != ActionVersion {
				t.Errorf("action %v", o.Action)
			}
		}},
		{"license", "-i", func(t *testing.T, o *Options) {
			if o.Action != ActionLicense {
				t.Errorf("action %v", o.Action)
			}
		}},
		{"napi ids", "-N 2", func(t *testing.T, o *Options) {
			if o.napiIDs != 2 {
				t.Errorf("got %d", o.napiIDs)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parse(splitArgs(tt.args), nil)
			if err != nil {
				t.Fatalf("%s: %v", tt.args, err)
			}
			if tt.check != nil {
				tt.check(t, o)
			}
		})
	}
}

func TestServerFlagsPortFile(t *testing.T) {
	o, err := parse(nil, map[string]string{"MEMCACHED_PORT_FILENAME": "/tmp/ports"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Config.PortFile != "/tmp/ports" {
		t.Errorf("PortFile %q", o.Config.PortFile)
	}
}

// TestServerFlagErrors pins memcached 1.6.18's start-up failures (text and
// exit status, checked against Debian's /usr/bin/memcached) and vbcache's
// own refusals.
func TestServerFlagErrors(t *testing.T) {
	tests := []struct {
		args string
		code int
		msg  string
	}{
		// checked while reading the flags
		{"-c 0", 1, "Maximum connections must be greater than 0"},
		{"-c -1", 1, "Maximum connections must be greater than 0"},
		{"--conn-limit=0", 1, "Maximum connections must be greater than 0"},
		{"-t 0", 1, "Number of threads must be greater than 0"},
		{"-t -1", 1, "Number of threads must be greater than 0"},
		{"-R 0", 1, "Number of requests per event must be greater than 0"},
		{"-f 1.0", 1, "Factor must be greater than 1"},
		{"-f 0.5", 1, "Factor must be greater than 1"},
		{"-n 0", 1, "Chunk size must be greater than 0"},
		{"-D ''", 1, "No delimiter specified"},
		{"-N 0", 1, "Maximum number of NAPI IDs must be greater than 0"},
		{"-B http", 64, "Invalid value for binding protocol: http\n -- should be one of auto, binary, or ascii"},
		{"-B ASCII", 64, "Invalid value for binding protocol: ASCII\n -- should be one of auto, binary, or ascii"},
		{"-o bogus", 1, `Illegal suboption "bogus"`},
		{"-o track_sizes,bogus=1", 1, `Illegal suboption "bogus=1"`},
		{"-o hashpower=20,,track_sizes", 1, `Illegal suboption ""`},
		{"-o hot_lru_pct=90", 1, "hot_lru_pct must be > 1 and < 80"},
		{"-o hot_lru_pct=0", 1, "hot_lru_pct must be > 1 and < 80"},
		{"-o warm_lru_pct=80", 1, "warm_lru_pct must be > 1 and < 80"},
		{"-o hot_lru_pct", 1, "Missing hot_lru_pct argument"},
		{"-o hashpower=11", 1, "Initial hashtable multiplier of 11 is too low"},
		{"-o hashpower=33", 1, "Initial hashtable multiplier of 33 is too high\nChoose a value based on \"STAT hash_power_level\" from a running instance"},
		{"-o hashpower", 1, "Missing numeric argument for hashpower"},
		{"-o idle_timeout", 1, "Missing numeric argument for idle_timeout"},
		{"-o slab_chunk_max=abc", 1, "could not parse argument to slab_chunk_max"},
		{"-o slab_chunk_max=0", 1, "slab_chunk_max must be greater than 0"},
		{"-o slab_chunk_max", 1, "Missing slab_chunk_max argument"},
		{"-o hash_algorithm=foo", 1, "Unknown hash_algorithm option (jenkins, murmur3, xxh3)"},
		{"-o hash_algorithm", 1, "Missing hash_algorithm argument"},
		{"-o lru_crawler_sleep=2000000", 1, "LRU crawler sleep must be between 0 and 1 second"},
		{"-o lru_crawler_sleep", 1, "Missing lru_crawler_sleep value"},
		{"-o lru_crawler_tocrawl=abc", 1, "lru_crawler_tocrawl takes a numeric 32bit value"},
		{"-o hot_max_factor=0", 1, "hot_max_factor must be > 0"},
		{"-o warm_max_factor=-1", 1, "warm_max_factor must be > 0"},
		{"-o tail_repair_time=5", 1, "Cannot set tail_repair_time to less than 10 seconds"},
		{"-o slab_automove=3", 1, "slab_automove must be between 0 and 2"},
		{"-o slab_automove_ratio=2", 1, "slab_automove_ratio must be > 0 and < 1"},
		{"-o slab_automove_window=2", 1, "slab_automove_window must be > 2"},
		{"-o watcher_logbuf_size=abc", 1, "could not parse argument to watcher_logbuf_size"},
		{"-o worker_logbuf_size=-1", 1, "could not parse argument to worker_logbuf_size"},
		{"-o read_buf_mem_limit=x", 1, "could not parse argument to read_buf_mem_limit"},
		{"-o temporary_ttl", 1, "Missing temporary_ttl argument"},
		// getopt's own complaints
		{"-x", 1, "vbcache server: invalid option -- 'x'"},
		{"--bogus", 1, "vbcache server: unrecognized option '--bogus'"},
		{"-p", 1, "vbcache server: option requires an argument -- 'p'"},
		{"--port", 1, "vbcache server: option '--port' requires an argument"},
		{"--daemon=1", 1, "vbcache server: option '--daemon' doesn't allow an argument"},
		{"--mem=64", 1, "vbcache server: option '--mem' is ambiguous; possibilities: '--memory-limit' '--memory-file'"},
		{"extra", 64, `vbcache server: unexpected argument "extra"`},
		{"-v -- extra", 64, `vbcache server: unexpected argument "extra"`},
		// vbcache refuses garbage that memcached's atoi would accept
		{"-p abc", 1, `vbcache: illegal value "abc" for -p (--port) (want an integer)`},
		{"-c 12abc", 1, `vbcache: illegal value "12abc" for -c (--conn-limit) (want an integer)`},
		{"-I 1.5m", 1, `vbcache: illegal value "1.5m" for -I (--max-item-size) (want a size in bytes with an optional k or m suffix)`},
		{"-I 1g", 1, `vbcache: illegal value "1g" for -I (--max-item-size) (want a size in bytes with an optional k or m suffix)`},
		{"-m abc", 1, `vbcache: illegal value "abc" for -m (--memory-limit) (want a number of megabytes, or with a g suffix gigabytes)`},
		{"-f abc", 1, `vbcache: illegal value "abc" for -f (--slab-growth-factor) (want a number)`},
		{"-a 999", 1, `vbcache: illegal value "999" for -a (--unix-mask) (want an octal mask such as 700)`},
		{"-o idle_timeout=abc", 1, `vbcache: illegal value "abc" for -o idle_timeout (want an integer)`},
		{"-o hashpower=abc", 1, `vbcache: illegal value "abc" for -o hashpower (want an integer)`},
		// -o ssl_* checked while reading the flags
		{"-o ssl_verify_mode=5", 1, "Invalid ssl_verify_mode. Use help to see valid options."},
		{"-o ssl_verify_mode=-1", 1, "Invalid ssl_verify_mode. Use help to see valid options."},
		{"-o ssl_verify_mode=abc", 1, "could not parse argument to ssl_verify_mode"},
		{"-o ssl_verify_mode", 1, "Missing ssl_verify_mode argument"},
		{"-o ssl_min_version=4", 1, "Invalid ssl_min_version. Use help to see valid options."},
		{"-o ssl_min_version=-1", 1, "Invalid ssl_min_version. Use help to see valid options."},
		{"-o ssl_min_version=2x", 1, "could not parse argument to ssl_min_version"},
		{"-o ssl_min_version=tlsv1.5", 1, "could not parse argument to ssl_min_version"},
		{"-o ssl_min_version", 1, "Missing ssl_min_version argument"},
		{"-o ssl_keyformat=abc", 1, "could not parse argument to ssl_keyformat"},
		{"-o ssl_keyformat", 1, "Missing ssl_keyformat argument"},
		{"-o ssl_wbuf_size=-1", 1, "could not parse argument to ssl_wbuf_size"},
		{"-o ssl_wbuf_size", 1, "Missing ssl_wbuf_size argument"},
		{"-o ssl_chain_cert", 1, "Missing ssl_chain_cert argument"},
		{"-o ssl_key", 1, "Missing ssl_key argument"},
		{"-o ssl_ca_cert", 1, "Missing ssl_ca_cert argument"},
		{"-o ssl_ciphers", 1, "Missing ssl_ciphers argument"},
		{"-o no_ssl_session_cache", 1, `Illegal suboption "no_ssl_session_cache"`},
		{"-o ssl_bogus", 1, `Illegal suboption "ssl_bogus"`},
		// -S, -Y and -Z after the other checks
		{"-S -B ascii", 64, "ERROR: You cannot allow the ASCII protocol while using SASL."},
		{"-S -B auto", 64, "ERROR: You cannot allow the ASCII protocol while using SASL."},
		{"-S -B ascii -Z -p 0", 64, "ERROR: You cannot allow the ASCII protocol while using SASL."},
		{"-S -B ascii -I 1000", 64, "Item max size cannot be less than 1024 bytes."},
		{"-S -B ascii -p 70000", 64, "ERROR: You cannot allow the ASCII protocol while using SASL."},
		{"-S", 1, "vbcache: -S needs MEMCACHED_SASL_PWDB to name a user:password file"},
		{"--enable-sasl -B binary", 1, "vbcache: -S needs MEMCACHED_SASL_PWDB to name a user:password file"},
		{"-Z -p 0", 64, "ERROR: You cannot enable SSL without a TCP port."},
		{"-Z -p 70000", 64, "ERROR: Invalid port number 70000."},
		{"-Z", 64, "Error loading the certificate chain: (null) : no file given (-o ssl_chain_cert=<file>)"},
		{"--enable-ssl -o ssl_key=/nonexistent", 64,
			"Error loading the certificate chain: (null) : no file given (-o ssl_chain_cert=<file>)"},
		{"-Z -o ssl_chain_cert=/nonexistent,ssl_key=/nonexistent", 64,
			"Error loading the certificate chain: /nonexistent : no such file or directory"},
		{"-Y /nonexistent", 1, "Could not open authfile [/nonexistent] for reading, error no such file or directory"},
		{"--auth-file=/nonexistent", 1, "Could not open authfile [/nonexistent] for reading, error no such file or directory"},
		{"-Y /nonexistent -Z -p 0", 64, "ERROR: You cannot enable SSL without a TCP port."},
		{"-Y /nonexistent -S", 1, "vbcache: -S needs MEMCACHED_SASL_PWDB to name a user:password file"},
		// not supported
		{"-e /dev/shm/mc", 64, "vbcache: -e (restartable memory file) is not supported"},
		{"-o ext_path=/tmp/x:64m", 64, "vbcache: -o ext_path (extstore) is not supported"},
		{"-o proxy_config=/tmp/p", 64, "vbcache: -o proxy_config (memcached's built-in proxy) is not supported"},
		// checked after the flags (EX_USAGE)
		{"-I 1000", 64, "Item max size cannot be less than 1024 bytes."},
		{"-I 0", 64, "Item max size cannot be less than 1024 bytes."},
		{"-I 256m", 64, "Cannot set item size limit higher than 1/2 of memory max."},
		{"-I 2000m", 64, "Cannot set item size limit higher than 1/2 of memory max."},
		{"-m 0", 64, "Cannot set item size limit higher than 1/2 of memory max."},
		{"-m 1", 64, "Cannot set item size limit higher than 1/2 of memory max."},
		{"-I 1025m -m 4000", 64, "Cannot set item size limit higher than a gigabyte."},
		{"-I 1000k", 64, "-I (item_size_max: 1024000) must be evenly divisible by slab_chunk_max (bytes: 524288)"},
		{"-I 600k", 64, "-I (item_size_max: 614400) must be evenly divisible by slab_chunk_max (bytes: 524288)"},
		{"-I 1k", 64, "slab_chunk_max (bytes: 524288) cannot be larger than -I (item_size_max 1024)"},
		{"-o slab_chunk_max=100", 64, "-I (item_size_max: 1048576) must be evenly divisible by slab_chunk_max (bytes: 100)"},
		{"-o slab_chunk_max=3072 -I 3m", 64, "slab_chunk_max (bytes: 3072) must divide evenly into 1048576 (slab_page_size)"},
		{"-o slab_sizes=300-200", 64, "slab size 200 cannot be lower than or equal to a previous class size"},
		{"-o slab_sizes=abc", 64, "slab size 0 is out of valid range"},
		{"-o slab_sizes=10-200", 64, "slab size 10 is out of valid range"},
		{"-o slab_sizes=100-104", 64, "slab size 104 must be at least 8 bytes larger than previous class"},
		{"-o hot_lru_pct=50,warm_lru_pct=40", 64, "hot_lru_pct + warm_lru_pct cannot be more than 80% combined"},
		{"-o no_modern,temporary_ttl=10", 64, "temporary_ttl requires lru_maintainer to be enabled"},
		{"-N 8", 64, "Number of napi_ids(8) cannot be greater than number of threads(4)"},
		{"-p 70000", 64, "ERROR: Invalid port number 70000."},
		{"-U 70000", 64, "ERROR: Invalid port number 70000."},
		{"-b -1", 64, "vbcache: listen backlog (-b) must not be negative, got -1"},
		// -l problems show when memcached binds (EX_OSERR)
		{"-l fooble", 71, "getaddrinfo(): Name or service not known\nfailed to listen on one of interface(s) fooble"},
		{"-l 127.0.0.1,fooble", 71, "getaddrinfo(): Name or service not known\nfailed to listen on one of interface(s) 127.0.0.1,fooble"},
		{"-l 127.0.0.1:abc", 71, "Invalid port number: \"abc\"\nfailed to listen on one of interface(s) 127.0.0.1:abc"},
		{"-l [::1", 71, "Invalid IPV6 address: \"[::1\"\nfailed to listen on one of interface(s) [::1"},
		{"-l notls:127.0.0.1", 71, "'notls' option is valid only when SSL is enabled\nfailed to listen on one of interface(s) notls:127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			_, err := parse(splitArgs(tt.args), nil)
			if err == nil {
				t.Fatalf("%s: no error, want %q", tt.args, tt.msg)
			}
			e, ok := err.(*ExitError)
			if !ok {
				t.Fatalf("%s: error %T %v is not an ExitError", tt.args, err, err)
			}
			if e.Msg != tt.msg || e.Code != tt.code {
				t.Errorf("%s:\n got %d %q\nwant %d %q", tt.args, e.Code, e.Msg, tt.code, tt.msg)
			}
		})
	}
}

// splitArgs splits on spaces; ” stands for an empty argument.
func splitArgs(s string) []string {
	var out []string
	for _, f := range strings.Fields(s) {
		if f == "''" {
			f = ""
		}
		out = append(out, f)
	}
	return out
}

// TestHelpCoversFlags checks that -h lists every flag vbcache accepts.
func TestHelpCoversFlags(t *testing.T) {
	refused := map[byte]bool{'e': true}
	for _, o := range options {
		if refused[o.short] {
			continue
		}
		if o.short > ' ' && !strings.Contains(HelpText, "-"+string(o.short)) {
			t.Errorf("help lacks -%c", o.short)
		}
		if o.long != "" && !strings.Contains(HelpText, "--"+o.long) {
			t.Errorf("help lacks --%s", o.long)
		}
	}
	for _, sub := range []string{"maxconns_fast", "hashpower", "tail_repair_time", "hash_algorithm",
		"lru_crawler", "lru_crawler_sleep", "lru_crawler_tocrawl", "read_buf_mem_limit", "lru_maintainer",
		"hot_lru_pct", "warm_lru_pct", "hot_max_factor", "warm_max_factor", "temporary_ttl", "idle_timeout",
		"slab_chunk_max", "slab_sizes", "slab_reassign", "slab_automove", "watcher_logbuf_size",
		"worker_logbuf_size", "track_sizes", "no_hashexpand", "no_chunked_items", "drop_privileges",
		"inline_ascii_resp", "sock_cookie_id", "modern", "no_modern", "ssl_chain_cert", "ssl_key",
		"ssl_keyformat", "ssl_verify_mode", "ssl_ciphers", "ssl_ca_cert", "ssl_wbuf_size", "ssl_session_cache",
		"ssl_kernel_tls", "ssl_min_version", "MEMCACHED_SASL_PWDB"} {
		if !strings.Contains(HelpText, sub) {
			t.Errorf("help lacks -o %s", sub)
		}
	}
}

func TestVBucketsFlag(t *testing.T) {
	env := func(string) string { return "" }
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 0},
		{[]string{"--vbuckets", "1024"}, 1024},
		{[]string{"--vbuckets=1"}, 1},
		{[]string{"--vbuckets=65536"}, 65536},
		{[]string{"--vbuckets=0"}, 0},
		{[]string{"--vbuck=8"}, 8},
	} {
		o, err := Parse(c.args, env)
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if o.Config.VBuckets != c.want {
			t.Errorf("%q: VBuckets = %d, want %d", c.args, o.Config.VBuckets, c.want)
		}
	}
	for _, bad := range []string{"3", "1000", "131072", "-2", "x", ""} {
		_, err := Parse([]string{"--vbuckets=" + bad}, env)
		want := `vbcache: illegal value "` + bad + `" for --vbuckets (want a power of two from 1 to 65536, or 0 for standalone)`
		if err == nil || err.Error() != want {
			t.Errorf("--vbuckets=%s: err %v, want %s", bad, err, want)
		}
	}
	if _, err := Parse([]string{"-\x01", "8"}, env); err == nil {
		t.Error("a control byte reached the long-only option")
	}
}
