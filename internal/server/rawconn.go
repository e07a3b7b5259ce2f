package server

import (
	"errors"
	"os"
	"time"

	"github.com/vbcache/vbcache/internal/rawio"
)

// Plain sockets are served from inside the runtime poller's read loop
// (see internal/rawio for why and why it is safe): rawStep reads, serves
// what it read, writes the replies and waits whenever its read came back
// short. It leaves the loop (returns true) for everything unusual: a
// read error or EOF, replies the socket would not take at once (written
// then by flush, which waits for the socket), a close, a stream handoff,
// shutdown. serveRaw handles those and enters the loop again.

// serveRaw is serve's loop for plain sockets.
func (c *conn) serveRaw() {
	idle := c.s.cfg.IdleTimeout
	for {
		c.state.Store(int32(stateRead))
		if idle > 0 {
			c.nc.SetReadDeadline(time.Now().Add(idle))
		}
		c.rawErr = nil
		if err := c.rc.Read(c.rawFn); err != nil {
			if idle > 0 && errors.Is(err, os.ErrDeadlineExceeded) && !c.s.closing.Load() {
				c.s.idleKicks.Add(1)
			}
			return
		}
		// rawStep served what it read; a half-closed client has had its
		// answers but for what the socket has not taken yet.
		if err := c.flush(); err != nil || c.close || c.rawErr != nil {
			return
		}
		if c.producerName != "" {
			c.state.Store(int32(stateWrite))
			c.s.cl.streams.ServeProducer(c.nc, c.rbuf[c.r:c.w], c.producerName)
			return
		}
		if c.s.closing.Load() {
			return
		}
	}
}

// rawStep is the read loop's callback (see above): true leaves the loop.
func (c *conn) rawStep(fd uintptr) bool {
	for {
		buf := c.rbuf[c.w:]
		n, wait, err := rawio.Fill(fd, buf)
		if wait {
			return false
		}
		if err != nil {
			c.rawErr = err
			return true
		}
		c.w += n
		c.ctr.bytesRead.Add(uint64(n))
		c.state.Store(int32(stateParse))
		need := c.processInput()
		if len(c.out) > 0 && !c.writeRaw(fd) {
			return true
		}
		if c.close || c.producerName != "" || c.s.closing.Load() {
			return true
		}
		c.makeRoom(need)
		if n < len(buf) {
			c.state.Store(int32(stateRead))
			if idle := c.s.cfg.IdleTimeout; idle > 0 {
				c.nc.SetReadDeadline(time.Now().Add(idle))
			}
			return false
		}
	}
}

// writeRaw writes the replies straight to the socket. It returns false,
// with what is left in c.out, when the socket would block or failed; the
// caller leaves the read loop and flush finishes the job (or meets the
// error).
func (c *conn) writeRaw(fd uintptr) bool {
	c.state.Store(int32(stateWrite))
	n, err := rawio.Write(fd, c.out)
	c.ctr.bytesWritten.Add(uint64(n))
	if err != nil {
		c.out = c.out[:copy(c.out, c.out[n:])]
		c.mark = 0
		c.authMark = -1
		return false
	}
	c.resetOut()
	return true
}
