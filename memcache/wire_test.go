package memcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/vbcache/vbcache/internal/protocol"
)

// Golden request bytes, one comment per field (STYLE.md habit 6).
func TestEncodeText(t *testing.T) {
	it := &Item{Key: "k", Value: []byte("v\r\n"), Flags: 7, Expiration: 60, CasID: 99}
	for _, c := range []struct {
		o    *op
		want string
	}{
		{&op{kind: opGet, key: "k"}, "gets k\r\n"},
		{&op{kind: opGat, key: "k", delta: 0xffffffff}, "gats -1 k\r\n"},
		{&op{kind: opMulti, keys: []string{"a", "b"}}, "gets a b\r\n"},
		{&op{kind: opStore, verb: verbSet, item: it}, "set k 7 60 3\r\nv\r\n\r\n"},
		{&op{kind: opStore, verb: verbCAS, item: it}, "cas k 7 60 3 99\r\nv\r\n\r\n"},
		{&op{kind: opStore, verb: verbPrepend, item: it}, "prepend k 7 60 3\r\nv\r\n\r\n"},
		{&op{kind: opDelete, key: "k"}, "delete k\r\n"},
		{&op{kind: opTouch, key: "k", delta: 5}, "touch k 5\r\n"},
		{&op{kind: opIncr, key: "k", delta: 18446744073709551615}, "incr k 18446744073709551615\r\n"},
		{&op{kind: opDecr, key: "k", delta: 1}, "decr k 1\r\n"},
		{&op{kind: opFlush}, "flush_all\r\n"},
		{&op{kind: opVersion}, "version\r\n"},
	} {
		if got := string(c.o.appendText(nil)); got != c.want {
			t.Errorf("kind %d: %q, want %q", c.o.kind, got, c.want)
		}
	}
}

func TestEncodeBinary(t *testing.T) {
	it := &Item{Key: "k", Value: []byte("vv"), Flags: 0x01020304, Expiration: 0x0a, CasID: 0x1122}
	o := &op{kind: opStore, verb: verbCAS, item: it, vb: 0x0338}
	want := []byte{
		0x80,       // magic: request
		0x01,       // opcode: set (CAS is a set with a cas value)
		0x00, 0x01, // key length 1
		0x08,       // extras length 8
		0x00,       // data type
		0x03, 0x38, // vbucket 824
		0x00, 0x00, 0x00, 0x0b, // body: 8 extras + 1 key + 2 value
		0x00, 0x00, 0x00, 0x00, // opaque
		0, 0, 0, 0, 0, 0, 0x11, 0x22, // cas
		0x01, 0x02, 0x03, 0x04, // extras: flags
		0x00, 0x00, 0x00, 0x0a, // extras: expiration
		'k',      // key
		'v', 'v', // value
	}
	if got := o.appendBinary(nil); !bytes.Equal(got, want) {
		t.Fatalf("got  % x\nwant % x", got, want)
	}
	m := &op{kind: opMulti, keys: []string{"a", "bc"}}
	got := m.appendBinary(nil)
	if len(got) != 3*24+3 || got[1] != byte(protocol.OpGetKQ) || got[15] != 0 || got[24+1+1] != byte(protocol.OpGetKQ) || got[24+1+15] != 1 ||
		got[2*24+3+1] != byte(protocol.OpNoop) || !bytes.Equal(got[2*24+3+12:2*24+3+16], []byte{0xff, 0xff, 0xff, 0xff}) {
		t.Fatalf("multi-get: % x", got)
	}
}

// TestEncodeBinaryNegativeExpiration: a negative expiration means "already
// expired" on every transport. The text protocol sends "-1"; the binary
// field is unsigned (0xffffffff would be a time in 2106), so it goes as an
// absolute time in 1970, past the 30-day line.
func TestEncodeBinaryNegativeExpiration(t *testing.T) {
	it := &Item{Key: "k", Value: []byte("v"), Expiration: -1}
	set := (&op{kind: opStore, verb: verbSet, item: it}).appendBinary(nil)
	neg := int32(-5)
	touch := (&op{kind: opTouch, key: "k", delta: uint64(uint32(neg))}).appendBinary(nil)
	gat := (&op{kind: opGat, key: "k", delta: uint64(uint32(neg))}).appendBinary(nil)
	want := binary.BigEndian.AppendUint32(nil, 30*24*3600+1)
	for name, got := range map[string][]byte{"set": set[28:32], "touch": touch[24:28], "gat": gat[24:28]} {
		if !bytes.Equal(got, want) {
			t.Errorf("%s: expiration % x, want % x", name, got, want)
		}
	}
	if s := string((&op{kind: opStore, verb: verbSet, item: it}).appendText(nil)); !strings.Contains(s, " 0 -1 1") {
		t.Errorf("text: %q", s)
	}
}

// TestParseText pins the response parser on named cases, fed whole and
// byte by byte (the reader hands it whatever has arrived).
func TestParseText(t *testing.T) {
	for _, c := range []struct {
		name    string
		o       *op
		in      string
		wantErr error // o.err
		bad     bool  // garbled: the conn must fail
		value   string
	}{
		{name: "hit", o: &op{kind: opGet, key: "k"}, in: "VALUE k 5 3 9\r\nabc\r\nEND\r\n", value: "abc"},
		{name: "hit-no-cas", o: &op{kind: opGat, key: "k"}, in: "VALUE k 0 1\r\nx\r\nEND\r\n", value: "x"},
		{name: "miss", o: &op{kind: opGet, key: "k"}, in: "END\r\n", wantErr: ErrCacheMiss},
		{name: "server-error", o: &op{kind: opGet, key: "k"}, in: "SERVER_ERROR out of memory\r\n", wantErr: ErrServerError},
		{name: "other-key", o: &op{kind: opGet, key: "k"}, in: "VALUE j 0 1\r\nx\r\nEND\r\n", bad: true},
		{name: "malformed1", o: &op{kind: opGet, key: "k"}, in: "VALUE k 0\r\nEND\r\n", bad: true},
		{name: "malformed2", o: &op{kind: opGet, key: "k"}, in: "VALUE k x 1\r\nx\r\nEND\r\n", bad: true},
		{name: "flags-overflow", o: &op{kind: opGet, key: "k"}, in: "VALUE k 4294967296 1\r\nx\r\nEND\r\n", bad: true},
		{name: "no-crlf-after-data", o: &op{kind: opGet, key: "k"}, in: "VALUE k 0 1\r\nxyEND\r\n", bad: true},
		{name: "bare-lf", o: &op{kind: opGet, key: "k"}, in: "END\n", bad: true},
		{name: "stored", o: &op{kind: opStore}, in: "STORED\r\n"},
		{name: "not-stored", o: &op{kind: opStore}, in: "NOT_STORED\r\n", wantErr: ErrNotStored},
		{name: "sync-ambiguous", o: &op{kind: opStore}, in: "SERVER_ERROR sync replication timed out; the write may not survive a failover\r\n", wantErr: ErrSyncWriteAmbiguous},
		{name: "exists", o: &op{kind: opStore}, in: "EXISTS\r\n", wantErr: ErrCASConflict},
		{name: "not-found", o: &op{kind: opStore}, in: "NOT_FOUND\r\n", wantErr: ErrCacheMiss},
		{name: "deleted", o: &op{kind: opDelete}, in: "DELETED\r\n"},
		{name: "incr", o: &op{kind: opIncr}, in: "18446744073709551615\r\n"},
		{name: "incr-overflow", o: &op{kind: opIncr}, in: "18446744073709551616\r\n", bad: true},
		{name: "incr-client-error", o: &op{kind: opIncr}, in: "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"},
		{name: "version", o: &op{kind: opVersion}, in: "VERSION 1.6.18\r\n"},
		{name: "flush-garbage", o: &op{kind: opFlush}, in: "HUH\r\n", bad: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, split := range []bool{false, true} {
				o := &op{kind: c.o.kind, key: c.o.key, keys: c.o.keys}
				in := []byte(c.in)
				var err error
				var done bool
				if !split {
					var n int
					n, done, err = o.parseText(in)
					if err == nil && (!done || n != len(in)) {
						t.Fatalf("whole: consumed %d of %d, done %v", n, len(in), done)
					}
				} else {
					// Feed one more byte at a time, keeping what was not consumed.
					var buf []byte
					for i := 0; i < len(in) && err == nil && !done; i++ {
						buf = append(buf, in[i])
						var n int
						n, done, err = o.parseText(buf)
						buf = buf[n:]
					}
				}
				if c.bad {
					if !errors.Is(err, errBadResponse) {
						t.Fatalf("split=%v: err %v, want a malformed response", split, err)
					}
					return
				}
				if err != nil || !done {
					t.Fatalf("split=%v: err %v done %v", split, err, done)
				}
				if c.wantErr != nil && !errors.Is(o.err, c.wantErr) {
					t.Fatalf("split=%v: o.err %v, want %v", split, o.err, c.wantErr)
				}
				if c.value != "" && (o.item == nil || string(o.item.Value) != c.value) {
					t.Fatalf("split=%v: item %+v", split, o.item)
				}
			}
		})
	}
}

func FuzzParseText(f *testing.F) {
	for _, s := range []string{"VALUE k 5 3 9\r\nabc\r\nEND\r\n", "END\r\n", "STORED\r\n", "VALUE a 0 1\r\nx\r\nVALUE b 0 0\r\n\r\nEND\r\n", "123\r\n", "SERVER_ERROR x\r\n"} {
		for k := opGet; k <= opVersion; k++ {
			f.Add(uint8(k), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, in []byte) {
		o := &op{kind: opKind(kind % uint8(opVersion+1)), key: "k", keys: []string{"a", "b", "k"}}
		n, _, err := o.parseText(in)
		if err == nil && (n < 0 || n > len(in)) {
			t.Fatalf("consumed %d of %d", n, len(in))
		}
	})
}

func FuzzParseBinary(f *testing.F) {
	hit := []byte{0x81, 0x00, 0, 0, 4, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 7, 'a', 'b'}
	f.Add(uint8(opGet), hit)
	f.Add(uint8(opMulti), hit)
	f.Fuzz(func(t *testing.T, kind uint8, in []byte) {
		o := &op{kind: opKind(kind % uint8(opVersion+1)), key: "k", keys: []string{"a", "b", "k"}}
		n, _, err := o.parseBinary(in)
		if err == nil && (n < 0 || n > len(in)) {
			t.Fatalf("consumed %d of %d", n, len(in))
		}
	})
}

// TestBinaryAllocs: encoding a binary request and parsing the replies that
// carry no new value (a store's, a miss, a multi-get's hits into a reused
// arena) allocate nothing.
func TestBinaryAllocs(t *testing.T) {
	it := &Item{Key: "key", Value: []byte("value"), Flags: 1, Expiration: 60, CasID: 2}
	buf := make([]byte, 0, 4096)
	for _, o := range []*op{
		{kind: opGet, key: "key", vb: 3},
		{kind: opGat, key: "key", delta: 60},
		{kind: opMulti, keys: []string{"a", "bc", "def"}, vbs: []uint16{1, 2, 3}},
		{kind: opStore, verb: verbSet, item: it, vb: 3},
		{kind: opStore, verb: verbCAS, item: it},
		{kind: opStore, verb: verbAppend, item: it},
		{kind: opDelete, key: "key"},
		{kind: opTouch, key: "key", delta: 60},
		{kind: opIncr, key: "key", delta: 1},
		{kind: opFlush},
		{kind: opVersion},
		{kind: opConfig, haveRev: true, rev: [2]int64{1, 2}},
	} {
		if n := testing.AllocsPerRun(100, func() { buf = o.appendBinary(buf[:0]) }); n != 0 {
			t.Errorf("appendBinary kind %d: %.1f allocations", o.kind, n)
		}
	}

	stored := []byte{0x81, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}
	miss := []byte{0x81, 0x00, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	multi := []byte{
		0x81, 0x0d, 0, 1, 4, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 7, 'a', 'x', 'y',
		0x81, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0,
	}
	for name, c := range map[string]struct {
		o  *op
		in []byte
	}{
		"store": {&op{kind: opStore, verb: verbSet, item: it}, stored},
		"miss":  {&op{kind: opGet, key: "key"}, miss},
		"multi": {&op{kind: opMulti, keys: []string{"a"}, arena: make([]byte, 0, 64), items: make([]Item, 0, 1)}, multi},
	} {
		o := c.o
		if n := testing.AllocsPerRun(100, func() {
			o.items, o.arena, o.err = o.items[:0], o.arena[:0], nil
			if n, done, err := o.parseBinary(c.in); n != len(c.in) || !done || err != nil {
				t.Fatalf("%s: parseBinary %d %v %v", name, n, done, err)
			}
		}); n != 0 {
			t.Errorf("parseBinary %s: %.1f allocations", name, n)
		}
	}
}

// TestTextAllocs: parsing the text replies that carry no new value (a
// store's, a miss, a counter, a multi-get's hits into a reused arena)
// allocates nothing.
func TestTextAllocs(t *testing.T) {
	for name, c := range map[string]struct {
		o  *op
		in string
	}{
		"store":   {&op{kind: opStore}, "STORED\r\n"},
		"missing": {&op{kind: opStore}, "NOT_FOUND\r\n"},
		"delete":  {&op{kind: opDelete}, "DELETED\r\n"},
		"incr":    {&op{kind: opIncr}, "42  \r\n"},
		"miss":    {&op{kind: opGet, key: "key"}, "END\r\n"},
		"multi": {&op{kind: opMulti, keys: []string{"a", "bc"}, arena: make([]byte, 0, 64), items: make([]Item, 0, 2)},
			"VALUE a 7 2 1\r\nxy\r\nVALUE bc 0 0\r\n\r\nEND\r\n"},
	} {
		o, in := c.o, []byte(c.in)
		if n := testing.AllocsPerRun(100, func() {
			o.items, o.arena, o.err, o.next = o.items[:0], o.arena[:0], nil, 0
			if n, done, err := o.parseText(in); n != len(in) || !done || err != nil {
				t.Fatalf("%s: parseText %d %v %v", name, n, done, err)
			}
		}); n != 0 {
			t.Errorf("parseText %s: %.1f allocations", name, n)
		}
	}
}

// BenchmarkParseText measures the text reply parser alone: a store's
// reply, and a ten-key multi-get's hits into a reused arena.
func BenchmarkParseText(b *testing.B) {
	var multi strings.Builder
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = "bench:" + strings.Repeat("1", i+1)
		multi.WriteString("VALUE " + keys[i] + " 0 100 12345\r\n" + strings.Repeat("v", 100) + "\r\n")
	}
	multi.WriteString("END\r\n")
	for _, c := range []struct {
		name string
		o    *op
		in   []byte
	}{
		{"store", &op{kind: opStore}, []byte("STORED\r\n")},
		{"multi10", &op{kind: opMulti, keys: keys, arena: make([]byte, 0, 4096), items: make([]Item, 0, 10)}, []byte(multi.String())},
	} {
		b.Run(c.name, func(b *testing.B) {
			o := c.o
			b.ReportAllocs()
			b.SetBytes(int64(len(c.in)))
			for b.Loop() {
				o.items, o.arena, o.err, o.next = o.items[:0], o.arena[:0], nil, 0
				if n, done, err := o.parseText(c.in); n != len(c.in) || !done || err != nil {
					b.Fatalf("parseText %d %v %v", n, done, err)
				}
			}
		})
	}
}
