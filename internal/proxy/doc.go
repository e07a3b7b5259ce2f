// Package proxy is "vbcache proxy": a memcached-protocol front end (text,
// meta and binary, chosen per connection by the first byte as a node
// does) over a memcache.Client upstream, in the spirit of twemproxy and
// memcached's own proxy.
//
// # Data flow
//
// Each client connection has one goroutine (owned by the Proxy; Close
// closes the socket and waits for it). It parses requests with
// protocol.ParseTextRequest, the grammar and error replies the node uses
// (the event loops parse with it too), runs each one against the
// current upstream and appends the reply; replies are written when the
// buffered input is drained, so a pipelining client gets them in batches.
// A connection's requests run in order, one at a time, so "set k" then
// "get k" on one connection always sees the set. Requests of all the
// connections share the upstream client, which multiplexes and pipelines
// them over a few connections per server (Config.ServerConnections). A
// multi-key get is split by server and sent to all of them before any
// answer is awaited (Client.GetMultiFunc); the values are gathered in the
// connection's scratch buffer and written in the order of the request's
// keys. Requests of one connection share one deadline context, renewed
// when it is an eighth of Config.Timeout older than a fresh one would be,
// so each request gets between 7/8 of the timeout and all of it.
//
// # Event loops
//
// Over a pool, a text client starts on an event loop (loop.go), the way
// twemproxy serves everyone from one thread: a loop per P owns an epoll
// set holding its clients and its own connections to the servers, and
// serves every classic command a server answers (get, gets, gat and gats
// with any number of keys, split by server; the storage commands, cas,
// delete, incr, decr and touch), the meta commands mg, ms, md and ma
// with the flags meta.go supports, stats (once the connection's earlier
// requests are answered, so that it counts them), flush_all (sent to
// every server), version, verbosity, mn and quit, and
// the binary requests that name a key (get, getk, gat, gatk, set, add,
// replace, append, prepend, delete, incr, decr, touch, loud and quiet)
// and noop, version, quit, stat, verbosity and flush, without a
// goroutine switch, forwarding the
// servers' answers as they are: a binary client's requests go to the
// servers in binary, so it gets memcached's own responses (its CAS
// values, a touch's flags), which the goroutine path's text upstream
// cannot give. One round reads every ready socket and writes each server and
// each client once. A server connection with requests in flight holds
// new ones until its next answer (Nagle's rule, for requests), so at
// pipeline 1 one write to a server carries the requests of many clients.
// Errors and refusals are answered on the loop too, by the code of the
// goroutine path below. A key with control characters takes the
// connection off the loop, once its requests there are answered, to a
// goroutine of its own, where it is served as described below.
// Config.NoEventLoops turns the loops off.
//
// # The fast path
//
// On a connection's goroutine,
// single-key text get, gets, set, add and replace, and binary GET, GETQ,
// GETK and GETKQ, over a pool do not wait
// on the client's goroutine (async.go): it sends the request with
// memcache's GetAsync or StoreAsync and goes back to its socket, and the
// upstream connection's reader goroutine writes the reply to the client
// (asyncReq.Complete), sparing the two goroutine switches of a request
// that waits. A client's pipelined gets are all in flight at once (up to
// 16), on every server they live on. With one connection per server (the
// default, as twemproxy's), requests reach each server in the order they
// were sent, so sets, adds and replaces are pipelined with them; with
// more, a storage command is alone in flight. Anything else waits for
// what is in flight. Replies are written in request order, those of one
// upstream read in one write (memcache.Flusher). The
// fast path allocates nothing per request (TestFastPathDoesNotAllocate);
// the plain path allocates the key string and, for a single-key get, the
// client's Item and Value.
//
// # Upstreams
//
// A pool (Config.Servers) is a memcache.Client over a selector built from
// distribution and hash (Config.selectorName maps twemproxy's names onto
// memcache's distributions), so keys land where libmemcached, twemproxy
// or the other libraries memcache reproduces would put them. A cluster
// (Config.Cluster or Config.Manager) is a memcache.NewCluster client: it
// bootstraps from the nodes over GET_CLUSTER_CONFIG (0xb5), routes by
// vbucket and retries NOT_MY_VBUCKET and TMPFAIL after learning the map.
// With a manager, the proxy also follows its streaming endpoint
// (/pools/default/bs/default) and makes the client refresh from the nodes
// as soon as the manager announces a newer map (memcache.Client has no
// hook to take a config from elsewhere). In cluster mode a request that
// fails (a node down, a failover in progress) is retried after a map
// refresh with a short backoff for up to ClusterConfig.RetryTimeout, so
// the client sees latency, not an error. Writes are the exception: after
// a failure that may have reached a node (a timeout, a connection lost
// mid-request) they are answered with SERVER_ERROR, and retried only
// after failures that prove they were not applied (a refusal, a failed
// connect; upstream.callOnce). Applied twice, incr, decr, append and
// prepend corrupt the value, add and cas answer as if they had failed,
// and a set or delete sent again can land after other clients' newer
// writes and undo them.
//
// # Errors
//
// Answers from the servers (misses, NOT_STORED, EXISTS, CLIENT_ERROR …)
// are passed on in the client's protocol. A failure to get an answer (the
// server is down, Config.Timeout passed, a cluster's retries ran out) is
// answered with "SERVER_ERROR proxy upstream <server>: <reason>" (binary:
// status 0x84 with that text), never by hanging or closing the client's
// connection. Bad input is answered as memcached answers it (ERROR,
// CLIENT_ERROR …), and a line that is garbage closes the connection, as
// memcached does.
//
// # Reload
//
// The upstream is an atomic pointer. Reload builds a new upstream from a
// new Config and swaps it in; each request holds a reference to the
// upstream it started on, and the old upstream's client is closed once the
// last such request has finished (or after 30 s). Client connections are
// never dropped by a reload. The listen address is not reloaded.
//
// # Locks
//
// Proxy.mu protects the set of connections and the closed flag (a
// connection's nc is set under it when it leaves a loop); ploop.mu
// protects a loop's new clients and its stopped flag;
// Proxy.reloadMu serializes reloads; upstream.mu protects its reference
// count; serverStats.mu protects the per-server map. No lock is held
// while talking to an upstream, and none of them nests inside another.
//
// # Not supported
//
// flush_all with a delay, the meta flags that need item metadata the
// client does not return (see meta.go), "me", binary SASL, and keys with
// control characters (the client refuses them: CLIENT_ERROR). Stats for
// items and slabs belong to the servers: ask them directly.
package proxy
