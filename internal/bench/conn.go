package bench

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// connStats are a connection's counters. The connection adds to them; the
// progress line reads them while the run goes on.
type connStats struct {
	requests  atomic.Uint64 // answered requests
	gets      atomic.Uint64
	sets      atomic.Uint64
	hits      atomic.Uint64 // keys
	misses    atomic.Uint64 // keys
	errors    atomic.Uint64
	bytesOut  atomic.Uint64
	bytesIn   atomic.Uint64
	latencyNs atomic.Uint64 // sum, for the progress line's mean
	noArrival atomic.Uint64 // Config.Arrival: replies whose read had no kernel timestamp
}

// countingReader counts the bytes read from a connection.
type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

// slot is one outstanding request.
type slot struct {
	op    opKind
	nkeys int
	sent  time.Time // write time (closed loop) or scheduled time (open loop)
}

// conn is one connection and everything it owns. Only its own goroutine(s)
// touch it, except st, which is atomic.
type conn struct {
	cfg   *Config
	nc    net.Conn
	r     *bufio.Reader
	wbuf  []byte
	wire  *wire
	pick  *picker
	hist  *Histogram
	lag   *Histogram // open loop: how late requests were sent
	arr   *arrivalReader
	ahist *Histogram // Config.Arrival: latency to the kernel's receive time
	st    connStats
	ring  []slot
	keys  []uint64 // ring keys: slot i uses keys[i*MultiGet:]
	head  int      // closed loop: oldest outstanding slot
	n     int      // closed loop: outstanding requests
	quota uint64   // requests left to send, when the run is bounded by count
	limit bool     // quota applies

	errMu    sync.Mutex // protects firstErr (reader and writer may both fail)
	firstErr error

	lastDeadline time.Time
}

// errNoArrival is returned when Config.Arrival is asked of a connection or a
// platform without receive timestamps.
var errNoArrival = errors.New("bench: receive timestamps (--arrival) need a TCP connection on 64-bit Linux")

func newConn(cfg *Config, nc net.Conn, ks *keyspace, pick *picker, quota uint64) (*conn, error) {
	c := &conn{
		cfg:   cfg,
		nc:    nc,
		wbuf:  make([]byte, 0, 64<<10),
		wire:  newWire(cfg.Protocol, ks),
		pick:  pick,
		hist:  NewHistogram(),
		lag:   NewHistogram(),
		ring:  make([]slot, cfg.Pipeline),
		keys:  make([]uint64, cfg.Pipeline*cfg.MultiGet),
		quota: quota,
		limit: cfg.Requests > 0,
	}
	if cfg.Arrival {
		a, err := newArrivalReader(nc, &c.st.bytesIn)
		if err != nil {
			return nil, err
		}
		c.arr, c.ahist = a, NewHistogram()
		c.r = bufio.NewReaderSize(a, 64<<10)
		return c, nil
	}
	c.r = bufio.NewReaderSize(countingReader{nc, &c.st.bytesIn}, 64<<10)
	return c, nil
}

// fail records err (the first one wins) and counts it.
func (c *conn) fail(err error) {
	c.st.errors.Add(1)
	c.errMu.Lock()
	if c.firstErr == nil {
		c.firstErr = err
	}
	c.errMu.Unlock()
}

// canSend reports whether another request may be issued, and uses up one
// unit of quota if so.
func (c *conn) canSend(stop *atomic.Bool, now, deadline time.Time) bool {
	if stop.Load() || (!deadline.IsZero() && !now.Before(deadline)) {
		return false
	}
	if c.limit {
		if c.quota == 0 {
			return false
		}
		c.quota--
	}
	return true
}

// fill prepares slot i with a new request and appends it to the write
// buffer.
func (c *conn) fill(i int, sent time.Time) {
	s := &c.ring[i]
	s.sent = sent
	keys := c.keys[i*c.cfg.MultiGet : (i+1)*c.cfg.MultiGet]
	if c.pick.isSet() {
		s.op, s.nkeys = opSet, 1
		keys[0] = c.pick.key()
		c.wbuf = c.wire.appendSet(c.wbuf, keys[0])
		return
	}
	s.op, s.nkeys = opGet, len(keys)
	for j := range keys {
		keys[j] = c.pick.key()
	}
	c.wbuf = c.wire.appendGet(c.wbuf, keys)
}

// flush writes the write buffer.
func (c *conn) flush(now time.Time) error {
	if len(c.wbuf) == 0 {
		return nil
	}
	// Refresh the read deadline now and then rather than per request:
	// replies to what is written now are due within Timeout.
	if now.Sub(c.lastDeadline) > c.cfg.Timeout/4 {
		c.nc.SetReadDeadline(now.Add(c.cfg.Timeout))
		c.lastDeadline = now
	}
	n, err := c.nc.Write(c.wbuf)
	c.st.bytesOut.Add(uint64(n))
	c.wbuf = c.wbuf[:0]
	return err
}

// handshake sends one get (of the first key) and reads its reply before
// the run, outside the figures, so that no request's latency includes the
// connection's set-up: the accept, and memcached's hand-over of the new
// connection from its main thread to a worker.
func (c *conn) handshake() error {
	keys := c.keys[:1]
	keys[0] = c.cfg.KeyMin
	c.nc.SetDeadline(time.Now().Add(c.cfg.Timeout))
	defer c.nc.SetDeadline(time.Time{})
	if _, err := c.nc.Write(c.wire.appendGet(c.wbuf[:0], keys)); err != nil {
		return err
	}
	_, err := c.wire.readReply(c.r, opGet, keys) // a hit or a miss; only its arrival counts
	return err
}

// complete reads the reply for slot i and records it, measuring latency
// from the slot's time.
func (c *conn) complete(i int) error {
	s := &c.ring[i]
	rep, err := c.wire.readReply(c.r, s.op, c.keys[i*c.cfg.MultiGet:i*c.cfg.MultiGet+s.nkeys])
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errors.New("bench: no reply within the timeout")
		}
		return err
	}
	lat := time.Since(s.sent)
	c.hist.Record(lat)
	if c.arr != nil {
		// The reply's last byte came with the latest read: bufio reads
		// only when what it holds does not complete the reply.
		if c.arr.last != 0 {
			c.ahist.Record(max(time.Duration(c.arr.last-s.sent.UnixNano()), 0))
		} else {
			c.st.noArrival.Add(1)
		}
	}
	c.st.latencyNs.Add(uint64(max(lat, 0)))
	if s.op == opSet {
		c.st.sets.Add(1)
	} else {
		c.st.gets.Add(1)
		c.st.hits.Add(uint64(rep.hits))
		c.st.misses.Add(uint64(rep.misses))
	}
	if rep.bad > 0 {
		c.st.errors.Add(uint64(rep.bad))
	}
	c.st.requests.Add(1)
	return nil
}

// runClosed drives the connection in closed loop until the deadline, the
// quota or stop, then waits for the outstanding replies.
func (c *conn) runClosed(stop *atomic.Bool, deadline time.Time) {
	p := len(c.ring)
	sending := true
	for {
		if sending {
			now := time.Now()
			for c.n < p {
				if !c.canSend(stop, now, deadline) {
					sending = false
					break
				}
				c.fill((c.head+c.n)%p, now)
				c.n++
			}
			if err := c.flush(now); err != nil {
				c.fail(err)
				return
			}
		}
		if c.n == 0 {
			return
		}
		// Read at least one reply, and every further reply already
		// buffered, before refilling the pipeline with one write.
		for {
			if err := c.complete(c.head); err != nil {
				c.fail(err)
				return
			}
			c.head = (c.head + 1) % p
			c.n--
			if c.n == 0 || c.r.Buffered() == 0 {
				break
			}
		}
	}
}

// runOpen drives the connection in open loop: request k is due at
// start+phase+k*interval, and its latency counts from then.
func (c *conn) runOpen(stop *atomic.Bool, start, deadline time.Time, phase, interval time.Duration) {
	p := len(c.ring)
	queue := make(chan int, p)   // slots written, in order
	credits := make(chan int, p) // free slots
	for i := range p {
		credits <- i
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // reader; the writer waits for it below
		defer wg.Done()
		failed := false
		for i := range queue {
			if !failed {
				if err := c.complete(i); err != nil {
					c.fail(err)
					failed = true
					c.nc.Close() // the writer's next write fails
				}
			}
			credits <- i
		}
	}()
	defer wg.Wait()
	defer close(queue)
	for k := int64(0); ; k++ {
		due := start.Add(phase + time.Duration(k)*interval)
		if !deadline.IsZero() && !due.Before(deadline) {
			break
		}
		now := time.Now()
		if due.After(now) {
			if err := c.flush(now); err != nil {
				c.fail(err)
				return
			}
			if stop.Load() {
				break
			}
			// Go's timers wake up to about a millisecond late on
			// common kernels; the lateness is charged to the request
			// (its latency counts from due) and shows in the send lag.
			time.Sleep(due.Sub(now))
		}
		if !c.canSend(stop, due, time.Time{}) {
			break
		}
		var i int
		select {
		case i = <-credits:
		default:
			// The pipe is full: send what is buffered, then wait.
			if err := c.flush(time.Now()); err != nil {
				c.fail(err)
				return
			}
			i = <-credits
		}
		c.fill(i, due)
		c.lag.Record(time.Since(due))
		queue <- i
	}
	if err := c.flush(time.Now()); err != nil {
		c.fail(err)
	}
}
