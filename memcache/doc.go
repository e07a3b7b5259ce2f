// Package memcache is vbcache's Go client for memcached-compatible servers
// (vbcache nodes, memcached, anything that speaks the text or binary
// protocol). Its API is gomemcache's (github.com/bradfitz/gomemcache):
// Item, Client with Get, GetMulti, Set, Add, Replace, Append, Prepend,
// CompareAndSwap, Delete, Increment, Decrement, Touch, GetAndTouch,
// FlushAll, DeleteAll, Ping and Close, the same error values and the same
// ServerSelector interface, so switching from gomemcache is an import
// change. Every call also has a Context variant taking a context.Context
// first (GetContext, SetContext, …).
//
// # Data flow
//
// A call validates the key, asks the ServerSelector for the key's server,
// takes a connection from that server's pool and sends the request. A
// connection is shared: requests from many goroutines are pipelined on it
// (encoded into one buffer and written together), and one reader
// goroutine per connection parses responses in order and hands each to
// its waiting caller. The pool opens a new connection (up to
// Client.MaxConns) only when every open one already has several requests
// waiting. GetMulti groups the keys by server, sends every server its
// share before waiting for any, and so runs the servers in parallel
// without starting a goroutine. GetAsync and StoreAsync send without
// waiting: the reader goroutine hands the outcome to a Completion instead
// of waking a caller (a proxy writes its client's reply from there). They
// make one attempt on one server and are refused by cluster clients,
// whose requests may need retries after a new map (async.go).
//
// # Memory
//
// Requests are encoded into the connection's reusable write buffer and
// responses parsed out of its read buffer, with hand-written encoders and
// parsers (no fmt, no bufio line copies); the grammar of text replies and
// the binary header codec are internal/protocol's (op.go, binary.go).
// Requests travel in pooled op structs. A Get allocates the Item and its
// Value; a Set allocates nothing: the Item is encoded before Set returns,
// and the caller may reuse it and its Value at once. GetMulti allocates
// one Item array and a few value buffers per server; the returned Items'
// Values are slices of those buffers (each capped at its length).
//
// # Errors
//
// Answers are kept apart from failures. A miss (ErrCacheMiss), NOT_STORED
// (ErrNotStored), EXISTS (ErrCASConflict), a bad key (ErrMalformedKey) or
// an error line from the server (SERVER_ERROR wraps ErrServerError) leaves
// the connection in use. A failed read or write, a timeout (Client.Timeout
// with requests waiting) or a garbled response fails the connection: every
// request waiting on it gets the error, the socket is closed and the pool
// replaces it. A call whose context ends returns ctx.Err(); its response,
// when it arrives, is read and dropped, and the connection stays usable.
//
// # Goroutines
//
// The only goroutines are the connection readers and, for a NewCluster
// client, one config refresher. A reader belongs to its connection and
// exits when the connection fails or is closed; Close stops the refresher
// and waits for it, then closes every connection and waits for their
// readers.
//
// # Clusters
//
// NewCluster bootstraps a vbucket client from any node of a vbcache
// cluster (binary GET_CLUSTER_CONFIG), routes each key to its vbucket's
// active server (vBucketMap), and follows the map as it changes: a
// NOT_MY_VBUCKET answer (which carries no value) makes the client apply
// the config in its body when newer, else try the vbucket's forward owner
// once if vBucketMapForward names another server, else ask the other
// nodes, and send the request again, with bounded backoff
// (ClusterOptions). A TMPFAIL answer (a vbucket pending on the node for
// longer than it parks requests) is retried the same way. The refresher
// polls for newer configs in the background. Exhausted retries return an
// error wrapping ErrNotMyVBucket or ErrTemporaryFailure.
//
// # Server selection
//
// NewSelector builds a selector by distribution name; Distributions lists
// them with the libraries each one matches: modulo (Cache::Memcached),
// modulo-python (python-memcached), modulo-crc32
// (gomemcache, also ServerList and New), modulo-oaat (libmemcached's
// default), ketama (libmemcached weighted ketama: pylibmc, php-memcached,
// npm memcached), ketama-spy (spymemcached) and vbucket (Couchbase
// vbuckets through a cluster map). Each was checked against the real
// library by test/interop, and the placements recorded there are pinned
// in testdata/placement. Modulo can rehash keys off a dead server as
// Cache::Memcached or python-memcached does (Options.Rehash); the ketama
// selectors can eject a failing server for a while as twemproxy does
// (Options.AutoEject). Both are off by default, because a client that
// moves keys on its own disagrees with every client that did not see the
// same failure. ketama-spy resolves host names when it is built, because
// spymemcached hashes a name together with its address
// (Options.LookupHost).
package memcache
