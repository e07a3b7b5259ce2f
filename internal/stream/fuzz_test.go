package stream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/vbucket"
)

func newFuzzNode(t testing.TB) *Node {
	st, err := store.New(store.Config{MaxBytes: 8 << 20, VBuckets: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	tab := vbucket.NewTable(4)
	n := NewNode(st, tab, 64<<10)
	st.SetObserver(n.Log)
	t.Cleanup(n.Close)
	return n
}

// seedStream is a well-formed producer stream for vbucket 1, opaque 1:
// a reset backfill with one item, an empty marker, a log batch with a
// mutation and a deletion, a SET_STATE and a STREAM_END.
func seedStream() []byte {
	var b []byte
	m := func(start, end uint64, flags uint32) {
		ex := binary.BigEndian.AppendUint64(nil, start)
		ex = binary.BigEndian.AppendUint64(ex, end)
		ex = binary.BigEndian.AppendUint64(ex, 99)
		ex = binary.BigEndian.AppendUint32(ex, flags)
		b = appendReq(b, OpSnapshot, 1, 1, 0, ex, nil, nil)
	}
	mut := func(seq uint64, key, val string) {
		ex := binary.BigEndian.AppendUint64(nil, seq)
		ex = binary.BigEndian.AppendUint64(ex, 0)
		ex = binary.BigEndian.AppendUint32(ex, 5)
		b = appendReq(b, OpMutation, 1, 1, 77, ex, []byte(key), []byte(val))
	}
	m(0, 3, SnapDisk|SnapReset)
	mut(3, "a", "1")
	m(4, 3, SnapMemory)
	m(4, 5, SnapMemory)
	mut(4, "b", "2")
	b = appendReq(b, OpDeletion, 1, 1, 0, binary.BigEndian.AppendUint64(nil, 5), []byte("a"), nil)
	b = appendReq(b, OpSetState, 1, 1, 0, []byte{byte(vbucket.Pending)}, nil, nil)
	b = appendReq(b, OpStreamEnd, 1, 1, 0, make([]byte, 4), nil, nil)
	return b
}

// FuzzConsumer feeds arbitrary producer output to a consumer: it must
// return an error or apply it, never panic, and leave the store valid.
func FuzzConsumer(f *testing.F) {
	f.Add(seedStream())
	f.Add([]byte{0x80, 0x57, 0, 1, 20, 0, 0, 1, 0, 0, 0, 21, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		n := newFuzzNode(t)
		n.States.Set(1, vbucket.Replica)
		c := &consumer{n: n, src: "fuzz", takeover: true, streams: map[uint16]*cstream{1: {vb: 1, opaque: 1}}}
		client, server := net.Pipe()
		defer client.Close()
		go io.Copy(io.Discard, client) // the consumer's answers
		c.nc = server
		r := bufio.NewReader(bytes.NewReader(data))
		var pk packet
		var buf []byte
		for i := 0; i < 1000; i++ {
			if err := readPacket(r, &pk, &buf); err != nil {
				break
			}
			done, err := c.handle(&pk)
			if done || err != nil {
				break
			}
		}
		server.Close()
		var st store.Stats
		n.Store.ReadStats(&st)
	})
}

func TestConsumerSeedApplies(t *testing.T) {
	n := newFuzzNode(t)
	n.States.Set(1, vbucket.Replica)
	c := &consumer{n: n, src: "t", takeover: true, streams: map[uint16]*cstream{1: {vb: 1, opaque: 1}}}
	client, server := net.Pipe()
	defer client.Close()
	go io.Copy(io.Discard, client)
	c.nc = server
	r := bufio.NewReader(bytes.NewReader(seedStream()))
	var pk packet
	var buf []byte
	var done bool
	for !done {
		if err := readPacket(r, &pk, &buf); err != nil {
			t.Fatal(err)
		}
		var err error
		if done, err = c.handle(&pk); err != nil {
			t.Fatal(err)
		}
	}
	var tx store.Tx
	if n.Store.Begin(&tx, []byte("a")) != store.Miss {
		t.Error("deleted key a is present")
	}
	tx.End()
	if n.Store.Begin(&tx, []byte("b")) != store.Hit || string(tx.Value()) != "2" || tx.Flags() != 5 || tx.CAS() != 77 {
		t.Error("key b not applied with its flags and CAS")
	}
	tx.End()
	if got := n.States.Get(1); got != vbucket.Pending {
		t.Errorf("state %v after SET_STATE pending", got)
	}
	if u, h := n.Log.Lineage(1); u != 99 || h != 5 {
		t.Errorf("lineage %d high %d, want 99 5", u, h)
	}
	if s := c.streams[1]; s.complete != 5 {
		t.Errorf("complete = %d, want 5", s.complete)
	}
	// A consumer raises its CAS counter past what it applied.
	n.Store.Begin(&tx, []byte("c"))
	tx.Store(0, 0, 0, []byte("x"), nil)
	if tx.CAS() <= 77 {
		t.Errorf("new CAS %d not above applied 77", tx.CAS())
	}
	tx.End()
}

// FuzzProducer feeds arbitrary consumer requests to a producer.
func FuzzProducer(f *testing.F) {
	req := func(op protocol.Opcode, vb uint16, extras []byte) []byte {
		return appendReq(nil, op, vb, 1, 0, extras, nil, nil)
	}
	sr := make([]byte, 20)
	f.Add(req(OpStreamReq, 1, sr))
	f.Add(append(req(OpStreamReq, 1, sr), req(OpBufferAck, 0, []byte{0, 0, 1, 0})...))
	f.Add(append(req(OpStreamReq, 2, sr), req(OpCloseStream, 2, nil)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := newFuzzNode(t)
		n.States.Set(1, vbucket.Active)
		n.States.Set(2, vbucket.Replica)
		var tx store.Tx
		for _, k := range []string{"x", "y", "z"} {
			n.Store.Begin(&tx, []byte(k))
			tx.SetVBucket(1)
			tx.Store(0, 0, 0, []byte("v"), nil)
			tx.End()
		}
		client, server := net.Pipe()
		go func() {
			client.Write(data)
			client.Close()
		}()
		n.ServeProducer(server, nil, "fuzz", false)
	})
}
