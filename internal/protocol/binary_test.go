package protocol

import (
	"bytes"
	"testing"
)

// A GETK request for "hello" in vbucket 528, as a vbucket-aware client
// sends it: the vbucket id rides in the reserved bytes 6-7.
var getkHello = []byte{
	0x80,       // magic: request
	0x0c,       // opcode: GetK
	0x00, 0x05, // key length: 5
	0x00,       // extras length
	0x00,       // data type: raw bytes
	0x02, 0x10, // vbucket: 528
	0x00, 0x00, 0x00, 0x05, // total body length: 5
	0xde, 0xad, 0xbe, 0xef, // opaque
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // CAS
	'h', 'e', 'l', 'l', 'o', // key
}

func TestParseRequestGolden(t *testing.T) {
	var r Request
	n, err := ParseRequest(getkHello, &r)
	if err != nil || n != len(getkHello) {
		t.Fatalf("ParseRequest = %d, %v", n, err)
	}
	if r.Opcode != OpGetK || r.VBucket != 528 || r.Opaque != 0xdeadbeef || string(r.Key) != "hello" || len(r.Extras) != 0 || len(r.Value) != 0 {
		t.Fatalf("parsed %+v", r)
	}
	if got := AppendRequest(nil, &r); !bytes.Equal(got, getkHello) {
		t.Fatalf("re-encoded\n%x\nwant\n%x", got, getkHello)
	}
	// Incomplete packets ask for more.
	for i := 0; i < len(getkHello); i++ {
		if n, err := ParseRequest(getkHello[:i], &r); n != 0 || err != nil {
			t.Fatalf("prefix %d: %d, %v", i, n, err)
		}
	}
}

func TestAppendResponseGolden(t *testing.T) {
	// A Get hit: flags 5 in the extras, value "hi", CAS 7.
	got := AppendResponse(nil, OpGet, StatusOK, 0x01020304, 7, []byte{0, 0, 0, 5}, nil, []byte("hi"))
	want := []byte{
		0x81,       // magic: response
		0x00,       // opcode: Get
		0x00, 0x00, // key length
		0x04,       // extras length: flags
		0x00,       // data type
		0x00, 0x00, // status: OK
		0x00, 0x00, 0x00, 0x06, // body: 4 extras + 2 value
		0x01, 0x02, 0x03, 0x04, // opaque
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, // CAS
		0x00, 0x00, 0x00, 0x05, // flags
		'h', 'i', // value
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got\n%x\nwant\n%x", got, want)
	}
	// NOT_MY_VBUCKET lands in the status bytes.
	nmv := AppendResponse(nil, OpGet, StatusNotMyVBucket, 0, 0, nil, nil, nil)
	if nmv[6] != 0x00 || nmv[7] != 0x07 {
		t.Fatalf("status bytes %x", nmv[6:8])
	}
}

func TestParseRequestErrors(t *testing.T) {
	bad := append([]byte(nil), getkHello...)
	bad[0] = 0x81
	var r Request
	if _, err := ParseRequest(bad, &r); err != ErrBadMagic {
		t.Errorf("bad magic: %v", err)
	}
	bad = append([]byte(nil), getkHello...)
	bad[11] = 0x02 // body length 2 < key length 5
	if _, err := ParseRequest(bad, &r); err != ErrBadLengths {
		t.Errorf("bad lengths: %v", err)
	}
}

func TestLoud(t *testing.T) {
	for q, l := range map[Opcode]Opcode{OpGetQ: OpGet, OpGetKQ: OpGetK, OpSetQ: OpSet, OpGATKQ: OpGATK, OpQuitQ: OpQuit} {
		if got, quiet := q.Loud(); got != l || !quiet {
			t.Errorf("%#x.Loud() = %#x, %v", q, got, quiet)
		}
	}
	if got, quiet := OpGet.Loud(); got != OpGet || quiet {
		t.Errorf("Get.Loud() = %#x, %v", got, quiet)
	}
}

// FuzzParseBinary: parsing never panics, and re-encoding a parsed request
// gives back exactly the bytes it was parsed from.
func FuzzParseBinary(f *testing.F) {
	f.Add(getkHello)
	f.Add(AppendRequest(nil, &Request{Header: Header{Opcode: OpSet, CAS: 9}, Extras: []byte{0, 0, 0, 1, 0, 0, 0, 0}, Key: []byte("k"), Value: []byte("v")}))
	f.Add([]byte{0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		n, err := ParseRequest(b, &r)
		if err != nil || n == 0 {
			return
		}
		if n > len(b) {
			t.Fatalf("consumed %d of %d", n, len(b))
		}
		re := AppendRequest(nil, &r)
		if !bytes.Equal(re, b[:n]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", re, b[:n])
		}
	})
}
