package streams

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/stream"
	"github.com/vbcache/vbcache/internal/vbucket"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// rawConsumer is a hand-driven stream consumer: it opens a stream and
// acknowledges only when told, so a test controls exactly how far behind
// it is. One goroutine (owned by the test through Close) reads every
// packet; the test goroutine writes.
type rawConsumer struct {
	t    *testing.T
	nc   net.Conn
	pkts chan rawPacket
	done chan struct{}
}

type rawPacket struct {
	h                  protocol.Header
	extras, key, value []byte
}

func openRawConsumer(t *testing.T, addr, name string, vb int) *rawConsumer {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cr := nodeproc.ClusterCredentials()
	if err := admin.Login(nc, cr.User, cr.Password); err != nil {
		nc.Close()
		t.Fatal(err)
	}
	rc := &rawConsumer{t: t, nc: nc, pkts: make(chan rawPacket, 1<<16), done: make(chan struct{})}
	go rc.readLoop()
	t.Cleanup(rc.Close)
	rc.send(stream.OpOpen, 0, make([]byte, 4), []byte(name))
	rc.expectResponse(stream.OpOpen)
	ex := make([]byte, 20) // flags 0, start 0, uuid 0: from the beginning
	rc.send(stream.OpStreamReq, vb, ex, nil)
	rc.expectResponse(stream.OpStreamReq)
	return rc
}

func (rc *rawConsumer) Close() {
	rc.nc.Close()
	<-rc.done
}

func (rc *rawConsumer) readLoop() {
	defer close(rc.done)
	defer close(rc.pkts)
	r := bufio.NewReader(rc.nc)
	for {
		var hb [protocol.HeaderLen]byte
		if _, err := io.ReadFull(r, hb[:]); err != nil {
			return
		}
		var p rawPacket
		protocol.ParseHeader(hb[:], &p.h)
		body := make([]byte, p.h.BodyLen)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		p.extras = body[:p.h.ExtLen]
		p.key = body[p.h.ExtLen : int(p.h.ExtLen)+int(p.h.KeyLen)]
		p.value = body[int(p.h.ExtLen)+int(p.h.KeyLen):]
		rc.pkts <- p
	}
}

func (rc *rawConsumer) send(op protocol.Opcode, vb int, extras, key []byte) {
	rc.t.Helper()
	req := protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: op, VBucket: uint16(vb), Opaque: 1},
		Extras: extras, Key: key})
	if _, err := rc.nc.Write(req); err != nil {
		rc.t.Fatal(err)
	}
}

// next returns the next packet (10 s at most).
func (rc *rawConsumer) next() rawPacket {
	rc.t.Helper()
	select {
	case p, ok := <-rc.pkts:
		if !ok {
			rc.t.Fatal("stream connection closed")
		}
		return p
	case <-time.After(10 * time.Second):
		rc.t.Fatal("no packet within 10 s")
	}
	return rawPacket{}
}

// expectResponse reads packets up to op's response, which must be OK.
func (rc *rawConsumer) expectResponse(op protocol.Opcode) {
	rc.t.Helper()
	for {
		p := rc.next()
		if p.h.Magic == protocol.MagicResponse && p.h.Opcode == op {
			if p.h.Status != protocol.StatusOK {
				rc.t.Fatalf("opcode %#x answered %#x %q", uint8(op), p.h.Status, p.value)
			}
			return
		}
	}
}

// mutationsUpTo reads packets until the mutation with seqno seq arrived.
func (rc *rawConsumer) mutationsUpTo(seq uint64) {
	rc.t.Helper()
	for {
		p := rc.next()
		if p.h.Magic == protocol.MagicRequest && (p.h.Opcode == stream.OpMutation || p.h.Opcode == stream.OpDeletion) &&
			binary.BigEndian.Uint64(p.extras) >= seq {
			return
		}
	}
}

// ackSeqno acknowledges seq and waits for a NOOP's answer: the producer
// reads requests in order, so the acknowledgement is recorded then.
func (rc *rawConsumer) ackSeqno(vb int, seq uint64) {
	rc.t.Helper()
	var ex [8]byte
	binary.BigEndian.PutUint64(ex[:], seq)
	rc.send(stream.OpSeqnoAck, vb, ex[:], nil)
	rc.send(protocol.OpNoop, 0, nil, nil)
	rc.expectResponse(protocol.OpNoop)
}

// TestLagFigures: a consumer that receives but does not acknowledge is
// exactly as far behind as the mutations after its last acknowledgement:
// seqno_behind counts them and bytes_behind sums their key and value
// bytes. The keys and values have known, different sizes, so each figure
// is checked to the byte, after acknowledgements at several points.
func TestLagFigures(t *testing.T) {
	nodes := startNodes(t, 1)
	a := dialCtl(t, nodes[0].Addr)
	const vb = 5
	a.setState(vb, vbucket.Active)
	rc := openRawConsumer(t, a.Addr, "lagtest:1", vb)
	keys := keysFor("lag", vb, 50)
	var sizes []int // key+value bytes of mutation i+1
	for i, k := range keys {
		v := strings.Repeat("v", 10+7*i)
		a.set(vb, k, v)
		sizes = append(sizes, len(k)+len(v))
	}
	rc.mutationsUpTo(uint64(len(keys)))
	behindAfter := func(acked int) int {
		n := 0
		for _, s := range sizes[acked:] {
			n += s
		}
		return n
	}
	check := func(acked int) {
		t.Helper()
		m := a.stats("streams")
		q := fmt.Sprintf("producer:lagtest:1:vb_%d:", vb)
		for name, want := range map[string]string{
			"high_seqno":   strconv.Itoa(len(keys)),
			"sent_seqno":   strconv.Itoa(len(keys)),
			"acked_seqno":  strconv.Itoa(acked),
			"seqno_behind": strconv.Itoa(len(keys) - acked),
			"bytes_behind": strconv.Itoa(behindAfter(acked)),
			"phase":        "live",
			"type":         "replication",
		} {
			if got := m[q+name]; got != want {
				t.Errorf("acked %d: %s = %q, want %q", acked, q+name, got, want)
			}
		}
	}
	check(0)
	for _, acked := range []int{1, 17, 49, 50} {
		rc.ackSeqno(vb, uint64(acked))
		check(acked)
	}
}

// TestLagPastTheRing: when more mutations are unacknowledged than the log
// ring holds (--stream-log-bytes=65536), seqno_behind stays exact and
// bytes_behind is a lower bound marked ">".
func TestLagPastTheRing(t *testing.T) {
	nodes := startNodes(t, 1, "--stream-log-bytes=65536")
	a := dialCtl(t, nodes[0].Addr)
	const vb = 6
	a.setState(vb, vbucket.Active)
	rc := openRawConsumer(t, a.Addr, "lagtest:2", vb)
	keys := keysFor("ring", vb, 200)
	const passes = 25 // 5,000 mutations: more entries than 64 KiB holds
	for p := range passes {
		for _, k := range keys {
			a.set(vb, k, "value-"+strconv.Itoa(p))
		}
	}
	total := passes * len(keys)
	rc.mutationsUpTo(uint64(total))
	m := a.stats("streams")
	q := fmt.Sprintf("producer:lagtest:2:vb_%d:", vb)
	if got := m[q+"seqno_behind"]; got != strconv.Itoa(total) {
		t.Errorf("seqno_behind %q, want %d", got, total)
	}
	bb := m[q+"bytes_behind"]
	n, err := strconv.Atoi(strings.TrimPrefix(bb, ">"))
	if !strings.HasPrefix(bb, ">") || err != nil || n <= 0 {
		t.Errorf("bytes_behind %q, want \">N\" (the ring no longer holds the start)", bb)
	}
	// Acknowledging all of it makes both exact zeros again.
	rc.ackSeqno(vb, uint64(total))
	m = a.stats("streams")
	if m[q+"seqno_behind"] != "0" || m[q+"bytes_behind"] != "0" {
		t.Errorf("after acknowledging everything: seqno_behind %q bytes_behind %q", m[q+"seqno_behind"], m[q+"bytes_behind"])
	}
}
