// Package proxy is "vbcache proxy": a memcached-protocol front end (text,
// meta and binary, chosen per connection by the first byte as a node
// does) over a pool of memcached servers or a vbcache cluster, in the
// spirit of twemproxy, moxi and memcached's own proxy.
//
// # Data flow
//
// Every client is served by an event loop (loop.go), the way twemproxy
// serves everyone from one thread: a loop per P owns an epoll set holding
// its clients and its own connections to the servers. Requests are parsed
// with protocol.ParseTextRequest, the grammar and error replies the node
// uses (and protocol.ParseRequest for binary ones), and forwarded: every
// classic command a server answers (get, gets, gat and gats with any
// number of keys, split by server; the storage commands, cas, delete,
// incr, decr and touch), the meta commands mg, ms, md and ma with the
// flags local.go lists, flush_all (to every server), and the binary
// requests that name a key (get, getk, gat, gatk, set, add, replace,
// append, prepend, delete, incr, decr, touch, loud and quiet) and flush.
// The servers' answers go to the client as they are, in request order: a
// binary client's requests go to the servers in binary, so it gets
// memcached's own responses (CAS values, a touch's flags). stats (once
// the connection's earlier requests are answered, so that it counts
// them), version, verbosity, mn, quit and their binary kin are answered
// by the loop itself. Requests the proxy answers without its servers
// (errors, refusals) are answered by local.go on the loop, in their turn.
// One round reads every ready socket and writes each server and each
// client once; a server connection with requests in flight holds new
// ones until its next answer (Nagle's rule, for requests), so at pipeline
// 1 one write to a server carries the requests of many clients. A
// client's requests to a server travel over one connection, so "set k"
// then "get k" always sees the set. Nothing on this path allocates per
// request (TestFastPathDoesNotAllocate). A client that is not a plain
// socket reaches a loop through a socketpair (Proxy.bridge).
//
// # Upstreams
//
// A pool (Config.Servers) places keys with a selector built from
// distribution and hash (Config.selectorName maps twemproxy's names onto
// memcache's distributions), so keys land where libmemcached, twemproxy
// or the other libraries memcache reproduces would put them; a failing
// server is reported to it (auto_eject_hosts). A cluster (Config.Cluster
// or Config.Manager) is routed by vbucket over a map the upstream keeps
// (upstream.route): the manager's config, or a node's over
// GET_CLUSTER_CONFIG (0xb5), at the start; then the newest of the
// manager's streaming endpoint (/pools/default/bs/default), the nodes'
// configs (fetched every refresh interval, and at once when a loop meets
// a refusal) and the maps in NOT_MY_VBUCKET answers. A request a node
// refuses (NOT_MY_VBUCKET, TMPFAIL), one whose node cannot be reached,
// and a read whose node failed after it was sent, go again after a short
// backoff, for up to ClusterConfig.RetryTimeout, so the client sees
// latency, not an error, while a vbucket moves or a node is failed over.
// Writes are the exception: after a failure that may have reached a node
// (a timeout, a connection lost mid-request) they are answered with
// SERVER_ERROR, and sent again only after failures that prove they were
// not applied (notApplied). Applied twice, incr, decr, append and
// prepend corrupt the value, add and cas answer as if they had failed,
// and a set or delete sent again can land after other clients' newer
// writes and undo them (loop_route.go).
//
// # Errors
//
// Answers from the servers (misses, NOT_STORED, EXISTS, CLIENT_ERROR …)
// are passed on as the servers sent them. A failure to get an answer (the
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
// new Config, swaps it in and wakes the loops, which move to it: a client
// with requests in flight on the old one waits for their answers first,
// and the old server connections close once they have answered. Client
// connections are never dropped by a reload. The listen address is not
// reloaded.
//
// # Locks
//
// Proxy.mu protects the set of connections, the bridged clients and the
// closed flag (a connection's nc is cleared under it when a loop takes
// it); ploop.mu protects a loop's new clients and its stopped flag;
// Proxy.reloadMu serializes reloads; serverStats.mu protects the
// per-server map. No lock is held while talking to a server, and only
// ploop.mu nests p.mu (add).
//
// # Not supported
//
// flush_all with a delay, the meta flags local.go lists as refused,
// "me", and binary SASL. Stats for items and slabs belong to the
// servers: ask them directly.
package proxy
