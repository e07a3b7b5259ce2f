// Package bench is vbcache's load generator, in the spirit of
// memtier_benchmark, and the harnesses that measure vbcache against what it
// replaces on one machine: a vbcache node against memcached (compare, and
// hitratio for their hit ratios at equal -m) and vbcache proxy against
// twemproxy (proxies).
//
// # Generator
//
// Run opens Threads×Clients connections to each server in Config.Servers and
// drives them until Duration has passed or Requests requests have been
// answered. Every connection belongs to one goroutine that Run starts and
// waits for; nothing outlives the call.
//
// Keys are picked from [KeyMin, KeyMax] by Pattern: uniform, gaussian,
// sequential (each connection its own slice), zipf (KeyMin+k-1 with
// probability ∝ k^-α, any α > 0, drawn exactly by rejection-inversion:
// zipf.go) or scan (zipf with a sequential scan ending every ScanEvery
// requests of a connection). Each connection draws from its own generator
// seeded with Seed plus its index, so a run's choices are repeatable.
//
// Before the load starts, each connection sends one get and reads its
// reply, outside the figures, so that no request's latency includes a
// connection's set-up (the accept, and memcached's hand-over of the new
// connection from its main thread to a worker).
//
// Closed loop (the default): a connection keeps up to Pipeline requests in
// flight. It appends requests into its own write buffer, sends them with one
// write, then reads replies in order from its own bufio.Reader; whenever
// replies free slots and no further reply is already buffered, it refills the
// pipeline with one more write. Latency is measured from the write that
// carried the request to the parse of its reply.
//
// Open loop (Rate > 0): each connection has a writer goroutine that sends
// request i at its scheduled time start + i/rate_per_conn, and a reader
// goroutine that parses replies. Latency is measured from the scheduled time,
// not from the actual write, so a server stall that delays later sends shows
// up in their latency (no coordinated omission). At most Pipeline requests are
// outstanding per connection; when the pipe is full the writer waits, and the
// lateness is charged to the requests it delays.
//
// Arrival (Config.Arrival): the connection reads with recvmsg and keeps
// the kernel's receive timestamp of the last segment each read returned; a
// reply completes with the latest read (bufio reads only when what it holds
// does not complete the reply), so that read's timestamp is the reply's
// arrival. Latency to it leaves out the time the reply waited in the socket
// for the generator. The kernel turns its receive timestamps on through
// deferred work, so Run first waits for a probe connection to show one.
//
// # Memory
//
// A connection owns its buffers: the write buffer, the reader, the key
// scratch buffer and the ring of outstanding requests (key indexes, kind,
// send time). Keys are rebuilt from their index when a reply is verified,
// so the hot loop allocates nothing. Each connection records latencies into
// its own Histogram; Run merges them once at the end. Counters that the
// progress line reads while the run is going are atomics owned by the
// connection.
//
// # Verification
//
// A get hit must name a key the request asked for (in order, for multi-gets)
// and carry a value of the length that key was stored with. Value lengths are
// a pure function of the key index (fixed, or spread over [DataSizeMin,
// DataSizeMax] by a hash of the index), so verification works across runs and
// with ranged sizes. A mismatched reply, SERVER_ERROR, CLIENT_ERROR, ERROR or
// an unexpected binary status counts as an error and the connection goes on;
// an I/O failure or a garbled frame counts as an error and closes that
// connection (the run continues on the others).
//
// # Harnesses
//
// Both harnesses are configurations of one runner (runner.go). A harness
// starts the processes under test through the runner (memcached, a vbcache
// node, a memcached pool, nutcracker, vbcache proxy), each pinned to the
// CPUs its config names and under chrt -f when permitted, preloads them
// (proxies also warms them up), then runs every workload in interleaved
// rounds over its targets: in each round, one run per target, in the same
// order every round (compare: memcached, vbcache) or rotated by one each
// round (proxies: direct, nutcracker, vbcache-proxy). A target is where a
// run's load goes and which processes' CPU it is charged to. Every run is
// the same measurement: the load is a child "vbcache bench --json" pinned
// to LoadCPU; around it the runner reads each charged group's utime+stime
// (a process counted once, however many ports it serves) and the cores'
// busy time from /proc; what neither the charged processes nor the load
// used is the run's "other CPU", the noise figure. Summaries take medians
// over the rounds. CompareConfig and ProxiesConfig embed the settings both
// share (Harness); compare.go and proxies.go say what each starts, which
// targets it measures and what its report says.
//
// The hit-ratio harness (hitratio.go) uses the runner only to start and
// stop the servers: it measures counts, not time, so it has no rounds and
// charges no CPU. For each workload it starts memcached and vbcache fresh
// with the same -m, and drives each in turn from this process with the
// cache-aside driver (cacheaside.go): one connection, gets pipelined in
// batches, a set after every miss, a warm-up and then a counted phase,
// each a number of gets. The gets are a function of the seed alone, the
// same for both servers (a digest of them proves it), so the two hit
// ratios answer the same requests.
//
// The processes under test belong to the runner, which stops them when a
// harness is done with them; a goroutine per child (env.go) waits for its
// exit, and the real environment's cleanup stops whatever is left and
// removes its scratch files. The decisions (the order of runs, the
// arithmetic, the medians, the verdicts, the reports) are pure functions
// over samples, tested with a fake environment; processes and /proc are
// touched only in env.go and proxies_env.go.
package bench
