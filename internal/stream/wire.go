package stream

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/vbcache/vbcache/internal/protocol"
)

// Stream opcodes. The numbers are DCP's; the layouts are vbcache's own
// (doc.go lists them), so a Couchbase DCP client cannot use them.
const (
	OpOpen        protocol.Opcode = 0x50 // consumer → producer: key = consumer name; extras 4 bytes, OpenNamed
	OpCloseStream protocol.Opcode = 0x52 // consumer → producer: vbucket in header
	OpStreamReq   protocol.Opcode = 0x53 // consumer → producer: extras flags(4) start(8) uuid(8)
	OpStreamEnd   protocol.Opcode = 0x55 // producer → consumer: extras reason(4)
	OpSnapshot    protocol.Opcode = 0x56 // producer → consumer: extras start(8) end(8) uuid(8) flags(4)
	OpMutation    protocol.Opcode = 0x57 // producer → consumer: extras seqno(8) exptime(8) flags(4); CAS in header
	OpDeletion    protocol.Opcode = 0x58 // producer → consumer: extras seqno(8)
	OpExpiration  protocol.Opcode = 0x59 // producer → consumer: extras seqno(8)
	OpSetState    protocol.Opcode = 0x5b // producer → consumer: extras state(1); answered
	OpBufferAck   protocol.Opcode = 0x5d // consumer → producer: extras bytes(4)
	OpSeqnoAck    protocol.Opcode = 0x5f // consumer → producer: extras seqno(8)

	// Control opcodes (a manager or `vbcache ctl` → the node that is to
	// receive a vbucket). Key: the source node as host:port.
	OpTakeover        protocol.Opcode = 0xe0 // move vbucket (header) here from key; answered when done
	OpReplicate       protocol.Opcode = 0xe1 // keep vbucket (header) here as a replica of key
	OpStopReplication protocol.Opcode = 0xe2 // stop replicating vbucket (header)
)

// OpenNamed, in the last byte of OPEN's extras, says the key is the name
// the cluster's map knows the consumer's node by (Node.ClusterName), not
// only its listening address.
const OpenNamed = 0x01

// Stream request flags.
const (
	FlagTakeover uint32 = 1 // end the stream by handing the vbucket over
)

// Snapshot marker flags.
const (
	SnapMemory uint32 = 0x1  // from the log
	SnapDisk   uint32 = 0x2  // a backfill from the store
	SnapReset  uint32 = 0x10 // drop your copy of the vbucket first
)

// Stream end reasons.
const (
	EndOK           uint32 = 0 // takeover complete
	EndClosed       uint32 = 1 // the consumer closed the stream
	EndStateChanged uint32 = 2 // the vbucket is no longer active or replica here
	EndAborted      uint32 = 5 // takeover aborted; the source stays active
)

// StatusRollback is not used; a stream that cannot resume restarts with a
// reset snapshot instead.

// packet is one decoded packet (request or response).
type packet struct {
	protocol.Header
	extras, key, value []byte
	size               int // bytes on the wire
}

// maxPacket bounds a stream packet body: an item is at most -I (1 MiB by
// default, 1 GiB at most), plus its key and extras.
const maxPacket = 1<<30 + 512

var errBadPacket = errors.New("stream: malformed packet")

// readPacket reads one packet, reusing buf for the body.
func readPacket(r *bufio.Reader, p *packet, buf *[]byte) error {
	var hb [protocol.HeaderLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return err
	}
	protocol.ParseHeader(hb[:], &p.Header)
	if p.Magic != protocol.MagicRequest && p.Magic != protocol.MagicResponse {
		return fmt.Errorf("%w: magic %#x", errBadPacket, p.Magic)
	}
	n := int(p.BodyLen)
	if n > maxPacket || int(p.KeyLen)+int(p.ExtLen) > n {
		return fmt.Errorf("%w: lengths", errBadPacket)
	}
	// Grow the buffer as the body arrives, so a header that announces a
	// huge body costs memory only for bytes actually sent.
	body := (*buf)[:0]
	for len(body) < n {
		step := min(n-len(body), 1<<20)
		if cap(body)-len(body) < step {
			nb := make([]byte, len(body), len(body)+max(step, cap(body)))
			copy(nb, body)
			body = nb
		}
		got, err := io.ReadFull(r, body[len(body):len(body)+step])
		body = body[:len(body)+got]
		if err != nil {
			return err
		}
	}
	*buf = body
	p.extras = body[:p.ExtLen]
	p.key = body[p.ExtLen : int(p.ExtLen)+int(p.KeyLen)]
	p.value = body[int(p.ExtLen)+int(p.KeyLen):]
	p.size = protocol.HeaderLen + n
	return nil
}

// appendReq appends a request packet.
func appendReq(dst []byte, op protocol.Opcode, vb uint16, opaque uint32, cas uint64, extras, key, value []byte) []byte {
	h := protocol.Header{Magic: protocol.MagicRequest, Opcode: op, KeyLen: uint16(len(key)), ExtLen: uint8(len(extras)),
		VBucket: vb, BodyLen: uint32(len(extras) + len(key) + len(value)), Opaque: opaque, CAS: cas}
	dst = protocol.AppendHeader(dst, &h)
	dst = append(dst, extras...)
	dst = append(dst, key...)
	return append(dst, value...)
}

func be64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }
func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }

// appendFailoverLog appends flog, the value of a STREAM_REQ answer: 16
// bytes a branch, newest first, each an 8-byte uuid and the 8-byte seqno
// the branch began after (big-endian, as DCP's failover log).
func appendFailoverLog(dst []byte, flog []Branch) []byte {
	for _, b := range flog {
		dst = binary.BigEndian.AppendUint64(dst, b.UUID)
		dst = binary.BigEndian.AppendUint64(dst, b.Start)
	}
	return dst
}

// parseFailoverLog reads a STREAM_REQ answer's value (appendFailoverLog);
// a value whose length is not a multiple of 16 is refused.
func parseFailoverLog(b []byte) ([]Branch, error) {
	if len(b)%16 != 0 {
		return nil, fmt.Errorf("%w: a failover log of %d bytes", errBadPacket, len(b))
	}
	flog := make([]Branch, 0, len(b)/16)
	for ; len(b) > 0; b = b[16:] {
		flog = append(flog, Branch{UUID: binary.BigEndian.Uint64(b), Start: binary.BigEndian.Uint64(b[8:])})
	}
	return flog, nil
}
