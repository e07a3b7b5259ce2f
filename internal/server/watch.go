package server

import (
	"bytes"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/store"
)

// memcached 1.6's "watch": a connection that sends it gets OK and, from
// then on, a line for each event of the kinds it named, until it closes;
// it sends no more commands. vbcache streams four of memcached 1.6.18's
// kinds, in its formats (logger.c):
//
// fetchers (also what a bare "watch" asks for): every item lookup, as
// memcached's do_item_get logs it: the gets', and also the lookup inside
// each storage command, incr/decr, touch, gat, delete and the meta
// commands (mn excepted). A found item's class and value size are given;
// a miss, expired or flushed item has clsid=0 size=0:
//
//	ts=<unix>.<usec> gid=<n> type=item_get key=<key> status=<found|not_found|flushed|expired> clsid=<class> cfd=<fd> size=<value bytes>
//
// mutations: every storage command's outcome (item_store):
//
//	ts=<unix>.<usec> gid=<n> type=item_store key=<key> status=<stored|exists|not_found|not_stored|no_memory> cmd=<set|add|replace|append|prepend|cas> ttl=<s> clsid=<class> cfd=<fd> size=<value bytes>
//
// evictions: every item the LRU evicts to make room (internal/store's
// eviction log; expired and flushed items reclaimed are not evictions).
// ttl is -1 for an item that never expired; la is the seconds since its
// last access:
//
//	ts=<unix>.<usec> gid=<n> type=eviction key=<key> fetch=<yes|no> ttl=<s> la=<s> clsid=<class> size=<value bytes>
//
// connevents: each client connection accepted and closed (TCP and unix
// sockets; UDP has no connections). A quit or the client's end of stream
// is "normal", a reset or a protocol error "error", -o idle_timeout
// "idle_timeout", the shutdown command or the node stopping "shutdown":
//
//	ts=<unix>.<usec> gid=<n> type=conn_new rip=<ip|unix> rport=<port> transport=<tcp|local> cfd=<fd>
//	ts=<unix>.<usec> gid=<n> type=conn_close rip=<ip|unix> rport=<port> transport=<tcp|local> reason=<error|normal|idle_timeout|shutdown> cfd=<fd>
//
// Where vbcache differs. memcached looks an item up once more in a few
// places, and so do we: an ma or binary incr that creates its item (N, or
// an initial value) logs two not_found lookups, as memcached's do_add_delta
// and then do_store_item do. memcached allocates a storage command's item
// before it looks the key up, so an eviction that makes room comes before
// that command's item_get line; vbcache looks up first, so the eviction
// line comes between the item_get and the item_store. la counts from the
// last access, where memcached's item time moves on a fetch only once a
// minute. A lookup that finds an expired or flushed item says so; in
// memcached the LRU maintainer thread often reclaims such an item before
// a client looks, and the lookup is then not_found. A value too large
// gets no item_store line (memcached 1.6.18 logs one whose clsid is the
// descriptor and whose cfd is garbage, and over the binary protocol
// crashes on ITEM_clsid(NULL)); an item stored already expired (a
// negative exptime) shows ttl=0, where memcached shows an unsigned
// underflow. Evictions made to apply a replication stream (cluster
// mode) are not logged: only a client connection's store.Tx has the
// callback. The other kinds 1.6.18 takes, sysevents, rawcmds and the
// proxy's three, are taken as it takes them, and log nothing here, as
// they log nothing in a memcached without its proxy or extstore;
// deletions (memcached 1.6.20's) is an ERROR, as in 1.6.18.
//
// How a line travels. The request path builds a line only while someone
// watches its kind: it pays one atomic load per kind it could log
// (watchers.fetchers etc.) and allocates nothing otherwise. A line made
// while the connection holds a store shard lock (a lookup, a store, an
// eviction, which the store reports from under its locks) is queued on
// the connection (conn.logq) and published once the command is done and
// its locks released (publishLog, called from processInput); connection
// events are published where they happen, under no lock. publish hands a
// line to each watcher of its kind without waiting: every watcher has a
// bounded queue, and when it is full (a watcher that reads too slowly) the
// line is dropped and counted in log_watcher_skipped, as memcached does,
// so a watcher never slows a request. Each watcher's lines are written to
// it by the goroutine of its own connection (watch, below).

// watchQueue is how many lines wait for a slow watcher before lines are
// dropped.
const watchQueue = 4096

// watchKind is a set of memcached's log kinds (LOG_FETCHERS etc.).
type watchKind uint8

const (
	watchFetchers watchKind = 1 << iota
	watchMutations
	watchEvictions
	watchConnEvents
)

// A watcher is one connection's subscription.
type watcher struct {
	kinds watchKind
	lines chan []byte // bounded; never closed (the watcher leaves by its own connection closing)
}

// watchers are the node's subscriptions.
type watchers struct {
	// mu protects list, which add and remove replace (never change in
	// place), so publish may range over the slice it read under mu after
	// letting go of it. The counts below change under mu too, so that
	// the store's eviction log is switched in the order watchers come
	// and go; they are read without it.
	mu   sync.Mutex
	list []*watcher

	// Watchers of each kind: the request path's checks.
	fetchers, mutations, evictions, connevents atomic.Int32

	store   *store.Store // its eviction log is on while evictions > 0
	gid     atomic.Uint64
	sent    atomic.Uint64 // log_watcher_sent
	skipped atomic.Uint64 // log_watcher_skipped
}

// counter returns the count of watchers of kind k.
func (w *watchers) counter(k watchKind) *atomic.Int32 {
	switch k {
	case watchFetchers:
		return &w.fetchers
	case watchMutations:
		return &w.mutations
	case watchEvictions:
		return &w.evictions
	}
	return &w.connevents
}

// countLocked adds d to the counts of x's kinds. Caller holds w.mu.
func (w *watchers) countLocked(x *watcher, d int32) {
	for k := watchFetchers; k <= watchConnEvents; k <<= 1 {
		if x.kinds&k == 0 {
			continue
		}
		n := w.counter(k).Add(d)
		if k == watchEvictions && w.store != nil && (n == 0 || d > 0 && n == 1) {
			w.store.LogEvictions(n > 0) // the first came or the last went
		}
	}
}

func (w *watchers) add(x *watcher) {
	w.mu.Lock()
	w.list = append(w.list[:len(w.list):len(w.list)], x) // a new array: publish may be reading the old one
	w.countLocked(x, 1)
	w.mu.Unlock()
}

func (w *watchers) remove(x *watcher) {
	w.mu.Lock()
	w.list = slices.DeleteFunc(slices.Clone(w.list), func(y *watcher) bool { return y == x })
	w.countLocked(x, -1)
	w.mu.Unlock()
}

func (w *watchers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.list)
}

// publish hands line to every watcher of kind without waiting: a full
// queue drops it. The caller holds no lock.
func (w *watchers) publish(kind watchKind, line []byte) {
	w.mu.Lock()
	list := w.list
	w.mu.Unlock()
	for _, x := range list {
		if x.kinds&kind == 0 {
			continue
		}
		select {
		case x.lines <- line:
			w.sent.Add(1)
		default:
			w.skipped.Add(1)
		}
	}
}

// A logLine is a line a connection made during its current command, to
// be published once the command has let go of its locks.
type logLine struct {
	kind watchKind
	line []byte
}

// queueLog queues line for publishLog.
func (c *conn) queueLog(kind watchKind, line []byte) {
	c.logq = append(c.logq, logLine{kind, line})
}

// publishLog publishes the lines the command just served queued. It is
// called between commands, when the connection holds no store lock.
func (c *conn) publishLog() {
	for i, l := range c.logq {
		c.s.watch.publish(l.kind, l.line)
		c.logq[i] = logLine{}
	}
	c.logq = c.logq[:0]
}

// logHead starts a line: memcached's "ts=%d.%d gid=%d type=" and typ.
func (s *Server) logHead(typ string, extra int) []byte {
	now := time.Now()
	b := make([]byte, 0, 128+extra)
	b = append(b, "ts="...)
	b = strconv.AppendInt(b, now.Unix(), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(now.Nanosecond()/1000), 10) // memcached's "%d.%d": the microseconds unpadded
	b = append(b, " gid="...)
	b = strconv.AppendUint(b, s.watch.gid.Add(1), 10)
	b = append(b, " type="...)
	return append(b, typ...)
}

// begin starts c.tx on key (store.Begin) and, while someone watches
// fetchers, logs the lookup. Every command's lookup goes through it.
func (c *conn) begin(key []byte) store.Outcome {
	oc := c.s.store.Begin(&c.tx, key)
	if c.s.watch.fetchers.Load() > 0 {
		c.logGet(oc, key)
	}
	return oc
}

var getStatusNames = [...]string{store.Miss: "not_found", store.Hit: "found", store.Flushed: "flushed", store.Expired: "expired"}

// logGet queues the item_get line of the lookup that Begin just made for
// key (outcome oc; c.tx holds the item on a hit). Callers check
// s.watch.fetchers first.
func (c *conn) logGet(oc store.Outcome, key []byte) {
	cls, size := 0, 0
	if oc == store.Hit {
		cls, size = c.tx.ClassID(), len(c.tx.Value())
	}
	b := c.s.logHead("item_get key=", 3*len(key))
	b = appendURIEncoded(b, key) // as memcached's logger writes keys
	b = append(b, " status="...)
	b = append(b, getStatusNames[oc]...)
	b = append(b, " clsid="...)
	b = strconv.AppendInt(b, int64(cls), 10)
	b = append(b, " cfd="...)
	b = strconv.AppendInt(b, int64(c.fd), 10)
	b = append(b, " size="...)
	b = strconv.AppendInt(b, int64(size), 10)
	b = append(b, '\n')
	c.queueLog(watchFetchers, b)
}

// logEviction is the connection's store.Tx OnEvict callback: it queues
// the eviction line of an item the store evicted to make room for this
// connection's store. It runs under the store's locks, so it only builds
// and queues the line.
func (c *conn) logEviction(ev *store.Eviction) {
	b := c.s.logHead("eviction key=", 3*len(ev.Key))
	b = appendURIEncoded(b, ev.Key)
	if ev.Fetched {
		b = append(b, " fetch=yes ttl="...)
	} else {
		b = append(b, " fetch=no ttl="...)
	}
	b = strconv.AppendInt(b, ev.TTL, 10)
	b = append(b, " la="...)
	b = strconv.AppendUint(b, uint64(ev.LastAccess), 10)
	b = append(b, " clsid="...)
	b = strconv.AppendInt(b, int64(ev.ClassID), 10)
	b = append(b, " size="...)
	b = strconv.AppendInt(b, int64(ev.Size), 10)
	b = append(b, '\n')
	c.queueLog(watchEvictions, b)
}

// closeReason is why a connection closed, as memcached's conn_close line
// says it (enum close_reasons). The zero value is an error: a command
// that ends its connection for a protocol error sets only c.close.
type closeReason uint8

const (
	closeError closeReason = iota
	closeNormal
	closeIdle
	closeShutdown
)

var closeReasonNames = [...]string{closeError: "error", closeNormal: "normal", closeIdle: "idle_timeout", closeShutdown: "shutdown"}

// logConn publishes a connection's conn_new line (closed false) or its
// conn_close line. Callers check s.watch.connevents first and hold no
// lock.
func (s *Server) logConn(c *conn, closed bool) {
	var b []byte
	if closed {
		b = s.logHead("conn_close rip=", 64)
	} else {
		b = s.logHead("conn_new rip=", 64)
	}
	transport := "tcp"
	switch a := c.raddr.(type) {
	case *net.TCPAddr:
		b = append(b, a.IP.String()...)
		b = append(b, " rport="...)
		b = strconv.AppendInt(b, int64(a.Port), 10)
	default: // a unix socket, as memcached names it
		b = append(b, "unix rport=0"...)
		transport = "local"
	}
	b = append(b, " transport="...)
	b = append(b, transport...)
	if closed {
		b = append(b, " reason="...)
		b = append(b, closeReasonNames[c.closeWhy]...)
	}
	b = append(b, " cfd="...)
	b = strconv.AppendInt(b, int64(c.fd), 10)
	b = append(b, '\n')
	s.watch.publish(watchConnEvents, b)
}

var storeCmdNames = [...]string{cmdSet: "set", cmdAdd: "add", cmdReplace: "replace", cmdAppend: "append", cmdPrepend: "prepend", cmdCAS: "cas"}
var storeResultNames = [...]string{resStored: "stored", resNotStored: "not_stored", resExists: "exists", resNotFound: "not_found", resNoMemory: "no_memory"}

// logStore queues a storage command's item_store line: the item it
// would store (the value's bytes, its class, its exptime) and how it went.
// Callers check s.watch.mutations first.
func (c *conn) logStore(sc storeCmd, res storeResult, key []byte, flags, exptime uint32, size int) {
	s := c.s
	ttl := uint32(0)
	if exptime > 0 {
		if rel, _ := s.store.Now(); exptime > rel {
			ttl = exptime - rel
		}
	}
	b := s.logHead("item_store key=", 3*len(key))
	b = appendURIEncoded(b, key) // as memcached's logger writes keys
	b = append(b, " status="...)
	b = append(b, storeResultNames[res]...)
	b = append(b, " cmd="...)
	b = append(b, storeCmdNames[sc]...)
	b = append(b, " ttl="...)
	b = strconv.AppendUint(b, uint64(ttl), 10)
	b = append(b, " clsid="...)
	b = strconv.AppendInt(b, int64(s.store.ClassFor(len(key), flags, size)), 10)
	b = append(b, " cfd="...)
	b = strconv.AppendInt(b, int64(c.fd), 10)
	b = append(b, " size="...)
	b = strconv.AppendInt(b, int64(size), 10)
	b = append(b, '\n')
	c.queueLog(watchMutations, b)
}

// watch is the "watch" command. The connection leaves its event loop (it
// will wait), answers OK, and then writes its watcher's lines until the
// client closes it or the node stops.
func (c *conn) watch() {
	c.setNoreply()
	if c.s.cfg.DisableWatch {
		c.reply("CLIENT_ERROR watch commands not allowed")
		return
	}
	t := &c.req.Tokens
	w := &watcher{lines: make(chan []byte, watchQueue)}
	n := t.Count() // memcached's tokens end with an empty one
	if n == 1 {
		w.kinds = watchFetchers // memcached's default
	}
	for i := 1; i < n; i++ {
		switch string(t.T[i]) {
		case "fetchers":
			w.kinds |= watchFetchers
		case "mutations":
			w.kinds |= watchMutations
		case "evictions":
			w.kinds |= watchEvictions
		case "connevents":
			w.kinds |= watchConnEvents
		case "sysevents", "rawcmds", "proxyreqs", "proxyevents", "proxyuser":
			// memcached 1.6.18 takes these and, outside its proxy and
			// extstore (which a node does not have), logs nothing of them.
		// (memcached 1.6.18 has no "deletions": ERROR, as below.)
		default:
			c.reply("ERROR")
			return
		}
	}
	c.mayBlock()
	if c.nc == nil { // UDP: nowhere to stream to
		c.reply("WATCHER_FAILED failed to add log watcher")
		return
	}
	// Watching before the OK goes out: a command sent after the client
	// read it is logged.
	c.s.watch.add(w)
	defer c.s.watch.remove(w)
	c.reply("OK")
	if c.flush() != nil {
		c.close = true
		return
	}
	// The client's end: whatever it sends is ignored, as memcached does
	// once a connection watches; its close (or the node's shutdown,
	// which closes nc) ends the stream.
	gone := make(chan struct{})
	go func() { // owned by this watch: ends when nc is closed or fails
		buf := make([]byte, 512)
		for {
			if _, err := c.nc.Read(buf); err != nil {
				close(gone)
				return
			}
		}
	}()
	var batch bytes.Buffer
	for {
		select {
		case <-gone:
			c.close = true
			c.closeWhy = closeNormal
			return
		case <-c.s.shutdownCh:
			c.close = true
			c.closeWhy = closeShutdown
			return
		case line := <-w.lines:
			batch.Reset()
			batch.Write(line)
			for more := true; more && batch.Len() < 64<<10; {
				select {
				case l := <-w.lines:
					batch.Write(l)
				default:
					more = false
				}
			}
			c.out = append(c.out, batch.Bytes()...)
			if c.flush() != nil {
				c.close = true
				return
			}
		}
	}
}
