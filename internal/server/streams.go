package server

import (
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/stream"
)

// Streams between nodes (cluster mode; internal/stream has the design).
//
// The opcodes arrive on the node's ordinary port:
//
//   - OPEN (0x50) turns the connection into a stream producer: once it is
//     answered, the connection belongs to stream.Node.ServeProducer.
//   - TAKEOVER (0xe0, key: source host:port, vbucket in the header) moves
//     the vbucket here and is answered when the move is over: OK once the
//     vbucket is active here, else status 0x84 with the reason as body.
//   - REPLICATE (0xe1, key: source) makes the vbucket a replica here fed
//     from the source; STOP_REPLICATION (0xe2) stops that.
//   - "stats streams" shows every stream with its lag.

// statusInternal is Couchbase's "Internal error" (0x84), the answer to a
// control request that failed; the body says why.
const statusInternal = protocol.StatusInternal

// binStreams handles the stream opcodes; handled is false for others.
func (c *conn) binStreams(op protocol.Opcode, extras, key []byte, skip func() (int, int, bool)) (used, need int, handled bool) {
	cl := c.s.cl
	vb := int(c.bh.VBucket)
	switch op {
	case stream.OpOpen:
		if len(key) == 0 || len(key) > 250 {
			c.binError(protocol.StatusInvalid)
			return skip()
		}
		c.producerName = string(key)
		c.producerNamed = len(extras) == 4 && extras[3]&stream.OpenNamed != 0
		c.binOK(0, nil, nil, nil)
		used, need, _ = skip()
		return used, need, true
	case stream.OpTakeover, stream.OpReplicate:
		if len(extras) != 0 || len(key) == 0 {
			c.binError(protocol.StatusInvalid)
			return skip()
		}
		if vb >= cl.vbs.Len() {
			c.binNotMyVBucket()
			return skip()
		}
		c.mayBlock() // a takeover waits for the move; the others stop or start streams
		var err error
		if op == stream.OpTakeover {
			// The move takes a while: answers already computed go out
			// first, then this connection waits for the result.
			if c.flush() != nil {
				c.close = true
				return skip()
			}
			err = cl.streams.Takeover(cl.parkCtx, vb, string(key))
		} else {
			err = cl.streams.Replicate(vb, string(key))
		}
		if err != nil {
			c.binErrorText(statusInternal, err.Error())
			return skip()
		}
		c.binOK(0, nil, nil, nil)
		return skip()
	case stream.OpStopReplication:
		if vb >= cl.vbs.Len() {
			c.binNotMyVBucket()
			return skip()
		}
		c.mayBlock()
		cl.streams.StopReplication(vb)
		c.binOK(0, nil, nil, nil)
		return skip()
	}
	return 0, 0, false
}

// streamStats is "stats streams [vbucket]".
func (c *conn) streamStats(only int) {
	c.s.cl.streams.Stats(only, c.statLine)
}
