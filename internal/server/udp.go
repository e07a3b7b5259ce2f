package server

import (
	"encoding/binary"
	"net"
)

// UDP: memcached's frame. Every datagram starts with an 8-byte header
//
//	0      2      4      6      8
//	+------+------+------+------+----------------
//	|reqid | seq  |total | 0    | payload ...
//	+------+------+------+------+----------------
//
// (big-endian). A request must fit in one datagram (seq 0, total 1); the
// reply is cut into datagrams of at most udpMaxPayload bytes including the
// header, numbered 0..total-1, all echoing the request id.
const (
	udpHeaderLen  = 8
	udpMaxPayload = 1400
)

// serveUDP owns one UDP socket: it reads datagrams and answers each with a
// connection object that lives as long as the socket.
func (s *Server) serveUDP(pc net.PacketConn) {
	defer s.wg.Done()
	c := newConn(s, nil)
	c.listen = pc.LocalAddr()
	c.ctr = &s.counters[0]
	buf := make([]byte, 65536)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		c.ctr.bytesRead.Add(uint64(n))
		if n < udpHeaderLen {
			continue
		}
		reqID := binary.BigEndian.Uint16(buf[0:2])
		c.out = c.out[:0]
		c.mark = 0
		c.swallow = 0
		c.close = false
		if buf[4] != 0 || buf[5] != 1 {
			c.out = append(c.out, "SERVER_ERROR multi-packet request not supported\r\n"...)
		} else {
			c.rbuf = buf[udpHeaderLen:n]
			c.r, c.w = 0, n-udpHeaderLen
			c.processInput()
		}
		s.sendUDP(pc, addr, reqID, c.out)
		c.ctr.bytesWritten.Add(uint64(len(c.out)))
	}
}

func (s *Server) sendUDP(pc net.PacketConn, addr net.Addr, reqID uint16, out []byte) {
	if len(out) == 0 {
		return
	}
	const chunk = udpMaxPayload - udpHeaderLen
	total := (len(out) + chunk - 1) / chunk
	pkt := make([]byte, udpMaxPayload)
	for seq := 0; seq < total; seq++ {
		part := out[seq*chunk : min((seq+1)*chunk, len(out))]
		binary.BigEndian.PutUint16(pkt[0:2], reqID)
		binary.BigEndian.PutUint16(pkt[2:4], uint16(seq))
		binary.BigEndian.PutUint16(pkt[4:6], uint16(total))
		binary.BigEndian.PutUint16(pkt[6:8], 0)
		n := copy(pkt[udpHeaderLen:], part)
		pc.WriteTo(pkt[:udpHeaderLen+n], addr)
	}
}
