package server

import (
	"bytes"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// memcached 1.6's "watch": a connection that sends it gets OK and, from
// then on, a line for each event of the kinds it named, until it closes;
// it sends no more commands. vbcache streams "mutations" (every storage
// command's outcome, memcached's item_store lines), in memcached's format:
//
//	ts=<unix>.<usec> gid=<n> type=item_store key=<key> status=<stored|exists|not_found|not_stored|no_memory> cmd=<set|add|replace|append|prepend|cas> ttl=<s> clsid=<class> cfd=<fd> size=<value bytes>
//
// A watcher's lines wait in a bounded queue; when it is full (a watcher
// that reads too slowly) lines are dropped and counted in
// log_watcher_skipped, as memcached does, so a watcher never slows a
// request. The request path pays one atomic load while nobody watches.
// Not streamed yet: fetchers (memcached logs every item lookup, its
// stores' own included), evictions, deletions, connevents, rawcmds and
// the proxy's kinds; asking for them is answered with CLIENT_ERROR.

// watchQueue is how many lines wait for a slow watcher before lines are
// dropped.
const watchQueue = 4096

// A watcher is one connection's subscription.
type watcher struct {
	mutations bool
	lines     chan []byte // bounded; never closed (the watcher leaves by its own connection closing)
}

// watchers are the node's subscriptions.
type watchers struct {
	// mu protects list, which add and remove replace (never change in
	// place), so publish may range over the slice it read under mu after
	// letting go of it.
	mu   sync.Mutex
	list []*watcher

	mutations atomic.Int32 // watchers that want mutations: the request path's check
	gid       atomic.Uint64
	sent      atomic.Uint64 // log_watcher_sent
	skipped   atomic.Uint64 // log_watcher_skipped
}

func (w *watchers) add(x *watcher) {
	w.mu.Lock()
	w.list = append(w.list[:len(w.list):len(w.list)], x) // a new array: publish may be reading the old one
	w.mu.Unlock()
	if x.mutations {
		w.mutations.Add(1)
	}
}

func (w *watchers) remove(x *watcher) {
	w.mu.Lock()
	w.list = slices.DeleteFunc(slices.Clone(w.list), func(y *watcher) bool { return y == x })
	w.mu.Unlock()
	if x.mutations {
		w.mutations.Add(-1)
	}
}

func (w *watchers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.list)
}

// publish hands line to every watcher that wants mutations without
// waiting: a full queue drops it.
func (w *watchers) publish(line []byte) {
	w.mu.Lock()
	list := w.list
	w.mu.Unlock()
	for _, x := range list {
		if !x.mutations {
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

var storeCmdNames = [...]string{cmdSet: "set", cmdAdd: "add", cmdReplace: "replace", cmdAppend: "append", cmdPrepend: "prepend", cmdCAS: "cas"}
var storeResultNames = [...]string{resStored: "stored", resNotStored: "not_stored", resExists: "exists", resNotFound: "not_found", resNoMemory: "no_memory"}

// logStore publishes a storage command's item_store line: the item it
// would store (the value's bytes, its class, its exptime) and how it went.
func (c *conn) logStore(sc storeCmd, res storeResult, key []byte, flags, exptime uint32, size int) {
	s := c.s
	now := time.Now()
	ttl := uint32(0)
	if exptime > 0 {
		if rel, _ := s.store.Now(); exptime > rel {
			ttl = exptime - rel
		}
	}
	b := make([]byte, 0, 160+3*len(key))
	b = append(b, "ts="...)
	b = strconv.AppendInt(b, now.Unix(), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(now.Nanosecond()/1000), 10) // memcached's "%d.%d": the microseconds unpadded
	b = append(b, " gid="...)
	b = strconv.AppendUint(b, s.watch.gid.Add(1), 10)
	b = append(b, " type=item_store key="...)
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
	s.watch.publish(b)
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
		c.reply("CLIENT_ERROR watch fetchers (the default) is not supported by vbcache yet: watch mutations")
		return
	}
	for i := 1; i < n; i++ {
		switch string(t.T[i]) {
		case "mutations":
			w.mutations = true
		case "fetchers", "evictions", "connevents", "rawcmds", "deletions", "proxyreqs", "proxyevents", "proxyuser":
			c.reply("CLIENT_ERROR watch " + string(t.T[i]) + " is not supported by vbcache yet: watch mutations")
			return
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
			return
		case <-c.s.shutdownCh:
			c.close = true
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
