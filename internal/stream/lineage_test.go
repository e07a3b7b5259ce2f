package stream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestProducerNamesNoLineageAfterForget: a vbucket deleted here
// (DEL_VBUCKET, Forget) between the producer's read of its log and the
// snapshot marker it sends for that batch has no lineage any more. The
// marker must not name lineage 0: a consumer that took it kept its items
// under no lineage, and a failover later ranked that copy by a seqno it
// did not stand for (fault schedule seed 1796671955255453869). The
// stream starts over instead, with a backfill of what is here now.
func TestProducerNamesNoLineageAfterForget(t *testing.T) {
	n := newFuzzNode(t)
	n.States.Set(1, vbucket.Active)
	p := &producer{n: n}
	s := &pstream{vb: 1, opaque: 1}
	s.uuid, _, s.gen = n.Log.Open(1, n.newUUID)
	var tx store.Tx
	for _, k := range []string{"x", "y", "z"} {
		n.Store.Begin(&tx, []byte(k))
		tx.SetVBucket(1)
		tx.Store(0, 0, 0, []byte("v"), nil)
		tx.End()
	}
	ents, _, ok := n.Log.Read(1, 0, s.gen, make([]Entry, 0, 8), nil)
	if !ok || len(ents) != 3 {
		t.Fatalf("read %d entries (ok %v), want 3", len(ents), ok)
	}
	n.Forget(1)
	p.sendEntries(s, ents)
	r := bufio.NewReader(bytes.NewReader(p.out))
	var pk packet
	var buf []byte
	for readPacket(r, &pk, &buf) == nil {
		if pk.Opcode == OpSnapshot && binary.BigEndian.Uint64(pk.extras[16:]) == 0 {
			t.Fatalf("a snapshot marker names lineage 0 (start %d, end %d)", binary.BigEndian.Uint64(pk.extras), binary.BigEndian.Uint64(pk.extras[8:]))
		}
	}
	if s.phase.Load() != phaseBackfill {
		t.Errorf("stream phase %s, want a backfill", phaseName(s.phase.Load()))
	}
}

// TestConsumerRefusesNoLineage: a snapshot marker naming lineage 0 is a
// bad packet (no producer names one: see the test above); the copy keeps
// the lineage it had.
func TestConsumerRefusesNoLineage(t *testing.T) {
	n := newFuzzNode(t)
	n.States.Set(1, vbucket.Replica)
	c := &consumer{n: n, src: "t", streams: map[uint16]*cstream{1: {vb: 1, opaque: 1}}}
	var b []byte
	m := func(start, end, uuid uint64, flags uint32) {
		ex := binary.BigEndian.AppendUint64(nil, start)
		ex = binary.BigEndian.AppendUint64(ex, end)
		ex = binary.BigEndian.AppendUint64(ex, uuid)
		ex = binary.BigEndian.AppendUint32(ex, flags)
		b = appendReq(b, OpSnapshot, 1, 1, 0, ex, nil, nil)
	}
	m(0, 3, 99, SnapDisk|SnapReset)
	m(4, 3, 99, SnapMemory)
	m(4, 5, 0, SnapMemory)
	r := bufio.NewReader(bytes.NewReader(b))
	var pk packet
	var buf []byte
	var err error
	for err == nil {
		if readPacket(r, &pk, &buf) != nil {
			break
		}
		_, err = c.handle(&pk)
	}
	if !errors.Is(err, errBadPacket) {
		t.Errorf("a marker naming lineage 0: %v, want a bad packet", err)
	}
	if u, _ := n.Log.Lineage(1); u != 99 {
		t.Errorf("lineage %d after the marker, want 99 kept", u)
	}
}
