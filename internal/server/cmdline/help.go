package cmdline

// HelpText is "vbcache server -h" after its version line: memcached
// 1.6.18's listing, trimmed to the flags vbcache accepts. memcached's test
// harness decides which suites to run by grepping this text (for
// "unix-socket", "sasl", "enable-ssl", and for the names of the extstore,
// built-in proxy and privilege-dropping options), so the options vbcache
// refuses are named here only by their short letters or prefixes, and
// those it supports by memcached's names.
const HelpText = `-p, --port=<num>          TCP port to listen on (default: 11211, 0: off, -1: any free port)
-U, --udp-port=<num>      UDP port to listen on (default: 0, off)
-s, --unix-socket=<file>  UNIX socket to listen on (disables network support)
-a, --unix-mask=<mask>    access mask for UNIX socket, in octal (default: 700)
-A, --enable-shutdown     enable ascii "shutdown" command
-l, --listen=<addr>       interface to listen on (default: INADDR_ANY)
                          comma separated; each <host>, <host>:<port> or
                          [<ipv6>]:<port>, optionally prefixed by
                          proto[ascii|binary|negotiating]: and tag[<name>]:
                          if TLS/SSL is enabled, 'notls' prefix can be used to
                          disable for specific listeners (-l notls:<ip>:<port>)
-d, --daemon              run as a daemon
-r, --enable-coredumps    maximize core file limit
-u, --user=<user>         assume identity of <username> (only when run as root;
                          unlike memcached, root may run without -u)
-m, --memory-limit=<num>  item memory in megabytes (default: 64)
-M, --disable-evictions   return error on memory exhausted instead of evicting
-c, --conn-limit=<num>    max simultaneous connections (default: 1024)
-k, --lock-memory         lock down all paged memory
-v, --verbose             verbose (print errors/warnings while in event loop)
-vv                       very verbose (also print client commands/responses)
-vvv                      extremely verbose (internal state transitions)
-h, --help                print this help and exit
-i, --license             print the license and exit
-V, --version             print version and exit
-P, --pidfile=<file>      save PID in <file>
-f, --slab-growth-factor=<num> chunk size growth factor (default: 1.25)
-n, --slab-min-size=<bytes> min space used for key+value+flags (default: 48)
-L, --enable-largepages   accepted; slab memory is on huge pages by default
                          (see -o no_hugepages)
-D <char>     Use <char> as the delimiter between key prefixes and IDs.
              This is used for per-prefix stats reporting. The default is
              ":" (colon). If this option is specified, stats collection
              is turned on automatically; if not, then it may be turned on
              by sending the "stats detail on" command to the server.
-t, --threads=<num>       number of threads to use (default: 4)
-R, --max-reqs-per-event  maximum number of requests per event, limits the
                          requests processed per connection to prevent
                          starvation (default: 20)
-C, --disable-cas         disable use of CAS
-b, --listen-backlog=<num> set the backlog queue limit (default: 1024)
-B, --protocol=<name>     protocol - one of ascii, binary, or auto (default: auto-negotiate)
-I, --max-item-size=<num> adjusts max item size
                          (default: 1m, min: 1k, max: 1024m)
-S, --enable-sasl         turn on Sasl authentication (binary protocol only;
                          implies -B binary). Credentials: "user:password"
                          lines in the file MEMCACHED_SASL_PWDB names
-F, --disable-flush-all   disable flush_all command
-X, --disable-dumping     disable stats cachedump and lru_crawler metadump
-W, --disable-watch       disable watch commands (live logging)
-Y, --auth-file=<file>    enable ASCII protocol authentication. format:
                          user:pass\nuser2:pass2\n
-Z, --enable-ssl          enable TLS/SSL (needs -o ssl_chain_cert and ssl_key)
-N, --napi-ids=<num>      accepted and ignored (number of napi ids)
    --vbuckets=<num>      cluster mode with <num> vbuckets (a power of two up
                          to 65536), all dead until told; 0: standalone (default)
    --pending-timeout=<duration>
                          cluster mode: how long a request for a pending
                          vbucket waits before TMPFAIL (default: 1s)
    --stream-log-bytes=<num>
                          cluster mode: memory for recent mutations kept per
                          vbucket being streamed to another node (default: 1048576)
    --sync-replication    cluster mode: answer a write once every replica (and a
                          move's target) has it, at most --pending-timeout later
    --cluster-auth=<file> cluster mode: the cluster administrator's "user:password"
                          (vbcache ctl init-security's admin.pwdb); control requests
                          need a SASL login as that user, and peers are logged in to
                          with it
    --insecure-cluster    cluster mode: serve control requests from anyone (without
                          it or --cluster-auth, a cluster node refuses them all)
                          With -Z, a cluster node dials its peers over TLS too,
                          presenting ssl_chain_cert and verifying theirs against
                          ssl_ca_cert (required); with ssl_verify_mode >= 1, a client
                          certificate from that CA whose CN is the administrator's
                          user name gives the admin role without SASL
    --metrics-listen=<addr> serve Prometheus metrics at http://<addr>/metrics
                          (memcached_exporter's names; off by default)
-o, --extended            comma separated list of extended options
                          most options have a 'no_' prefix to disable
   - maxconns_fast:       immediately close new connections after limit (default: enabled)
   - hashpower:           an integer multiplier for how large the hash
                          table should be. normally grows at runtime. (default starts at: 0)
                          set based on "STAT hash_power_level"
   - tail_repair_time:    accepted and ignored
   - hash_algorithm:      accepted and ignored (jenkins, murmur3, xxh3)
   - no_lru_crawler:      disable LRU Crawler background thread.
   - lru_crawler_sleep:   accepted and ignored
   - lru_crawler_tocrawl: accepted and ignored
   - read_buf_mem_limit:  accepted and ignored
   - no_lru_maintainer:   disable the segmented LRU (one flat LRU per class)
   - hot_lru_pct:         pct of slab memory to reserve for hot lru.
                          (requires lru_maintainer, default pct: 20)
   - warm_lru_pct:        pct of slab memory to reserve for warm lru.
                          (requires lru_maintainer, default pct: 40)
   - hot_max_factor:      accepted and ignored
   - warm_max_factor:     accepted and ignored
   - temporary_ttl:       accepted and ignored (requires lru_maintainer)
   - idle_timeout:        timeout for idle connections. (default: 0, no timeout)
   - max_conns_per_ip:    (vbcache) connections one client address may hold;
                          more are refused like -c's (default: 0, no limit)
   - max_unauth_conns:    (vbcache) with -S or -Y, connections that may be open
                          and not yet authenticated (default: 0, no limit)
   - unauth_timeout:      (vbcache) with -S or -Y, seconds a connection may stay
                          unauthenticated before it is closed (default: 0, no limit)
   - slab_chunk_max:      maximum slab chunk size in bytes. (default: 524288)
   - slab_sizes:          accepted and ignored (classes follow -f and -n)
   - slab_reassign:       let pages move between slab classes (default: enabled)
   - slab_automove:       accepted and ignored (also _ratio, _window)
   - watcher_logbuf_size: accepted and ignored
   - worker_logbuf_size:  accepted and ignored
   - track_sizes:         enable dynamic reports for 'stats sizes' command.
   - no_hashexpand:       accepted and ignored
   - no_chunked_items:    slab_chunk_max becomes the page size
   - no_hugepages:        (vbcache) do not ask for transparent huge pages for
                          slab memory (default: asked for, as memcached's -L)
   - drop_privileges:     accepted and ignored (also its no_ form)
   - inline_ascii_resp:   accepted and ignored
   - sock_cookie_id:      accepted and ignored
   - modern:              enables options which will be default in future.
                          currently: nothing
   - no_modern:           uses defaults of previous major version (1.4.x)
   - ssl_chain_cert:      certificate chain file in PEM format
   - ssl_key:             private key, if not part of the -ssl_chain_cert
   - ssl_keyformat:       private key format: 1 or PEM (default); 2 (DER)
                          is refused, convert the key to PEM
   - ssl_verify_mode:     peer certificate verification mode, default is 0(None).
                          valid values are 0(None), 1(Request), 2(Require)
                          or 3(Once, the same as Require)
   - ssl_ciphers:         TLS 1.2 cipher suites, OpenSSL or IANA names separated
                          by ':'; OpenSSL keywords (HIGH, !aNULL, ...) keep
                          Go's defaults, with a warning. TLS 1.3 suites are fixed
   - ssl_ca_cert:         PEM format file of acceptable client CA's
   - ssl_wbuf_size:       accepted and ignored
   - ssl_session_cache:   enable server-side SSL session cache, to support session
                          resumption (=no turns it off again)
   - ssl_kernel_tls:      accepted and ignored
   - ssl_min_version:     minimum protocol version to accept (default: tlsv1.2)
                          valid values are 0(tlsv1.0), 1(tlsv1.1), 2(tlsv1.2), or 3(tlsv1.3),
                          by number or by name

Not supported: -e (memory file), and the ext_* and proxy_* extended options;
vbcache refuses to start with them rather than ignore them.
Environment: MEMCACHED_PORT_FILENAME=<file> writes the bound ports to <file>.
MEMCACHED_SASL_PWDB=<file> holds the -S credentials (required with -S).
`
