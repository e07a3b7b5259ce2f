package server

import "github.com/vbcache/vbcache/internal/rawio"

// writeRaw writes the replies straight to the socket of a connection on an
// event loop. It returns false, with what is left in c.out, when the
// socket would block or failed; the caller detaches the connection and
// flush finishes the job (or meets the error) on its own goroutine.
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
