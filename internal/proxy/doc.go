// Package proxy is "vbcache proxy": a memcached-protocol front end (text,
// meta and binary, chosen per connection by the first byte as a node
// does) over a memcache.Client upstream, in the spirit of twemproxy and
// memcached's own proxy.
//
// # Data flow
//
// Over a pool (Config.Servers), every client is served by an event loop
// (loop.go), the way twemproxy serves everyone from one thread: a loop
// per P owns an epoll set holding its clients and its own connections to
// the servers. Requests are parsed with protocol.ParseTextRequest, the
// grammar and error replies the node uses (and protocol.ParseRequest for
// binary ones), and forwarded: every classic command a server answers
// (get, gets, gat and gats with any number of keys, split by server; the
// storage commands, cas, delete, incr, decr and touch), the meta
// commands mg, ms, md and ma with the flags meta.go supports, flush_all
// (to every server), and the binary requests that name a key (get, getk,
// gat, gatk, set, add, replace, append, prepend, delete, incr, decr,
// touch, loud and quiet) and flush. The servers' answers go to the
// client as they are, in request order: a binary client's requests go
// to the servers in binary, so it gets memcached's own responses (CAS
// values, a touch's flags). stats (once the connection's earlier
// requests are answered, so that it counts them), version, verbosity,
// mn, quit and their binary kin are answered by the loop itself.
// Requests the proxy answers without its servers (errors, refusals)
// are answered on the loop by the goroutine path's code (below, inline),
// in their turn. One round reads every ready socket and writes each
// server and each client once; a server connection with requests in
// flight holds new ones until its next answer (Nagle's rule, for
// requests), so at pipeline 1 one write to a server carries the requests
// of many clients. A client's requests to a server travel over one
// connection, so "set k" then "get k" always sees the set. Nothing on
// this path allocates per request (TestFastPathDoesNotAllocate).
//
// # The goroutine path
//
// A cluster's clients (the vbucket client routes, retries and follows
// the map; see Upstreams), a pool client that sends a key with control
// characters (memcache.Client refuses it, and the proxy answers per
// command; it leaves its loop once its requests there are answered), and
// every client under Config.NoEventLoops (for comparisons) are served by
// a goroutine of their own (owned by the Proxy; Close closes the socket
// and waits for it): text.go, meta.go and binary.go run each request
// against the upstream's memcache.Client and append the reply, and the
// replies are written when the buffered input is drained. A connection's
// requests run in order, one at a time. Requests of all the connections
// share the upstream client, which multiplexes and pipelines them over a
// few connections per server (Config.ServerConnections). A multi-key get
// is split by server and sent to all of them before any answer is awaited
// (Client.GetMultiFunc); the values are gathered in the connection's
// scratch buffer and written in the order of the request's keys.
// Requests of one connection share one deadline context, renewed when it
// is an eighth of Config.Timeout older than a fresh one would be, so each
// request gets between 7/8 of the timeout and all of it.
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
