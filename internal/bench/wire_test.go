package bench

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
	"testing"
)

// testWire has keys "k:0".."k:9" (width 1) and 3-byte values.
func testWire(p Protocol) *wire {
	c := Config{KeyPrefix: "k:", KeyMax: 9, DataSize: 3}
	c = c.withDefaults()
	return newWire(p, newKeyspace(&c))
}

func TestKeyspace(t *testing.T) {
	c := (&Config{KeyPrefix: "key:", KeyMax: 999_999, KeyWidth: 7}).withDefaults()
	ks := newKeyspace(&c)
	if got := string(ks.appendKey(nil, 42)); got != "key:0000042" {
		t.Errorf("key %q", got)
	}
	c = (&Config{KeyMax: 99_999}).withDefaults()
	if got := string(newKeyspace(&c).appendKey(nil, 7)); got != "key:00007" {
		t.Errorf("default width: %q", got)
	}
	c = (&Config{DataSizeMin: 10, DataSizeMax: 20}).withDefaults()
	ks = newKeyspace(&c)
	for i := range uint64(1000) {
		if n := ks.valueSize(i); n < 10 || n > 20 || n != ks.valueSize(i) {
			t.Fatalf("size %d", n)
		}
	}
}

func TestRequestEncodingGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proto Protocol
		set   bool
		keys  []uint64
		want  string
	}{
		{"text-get", Text, false, []uint64{1}, "get k:1\r\n"},
		{"text-multiget", Text, false, []uint64{1, 2, 3}, "get k:1 k:2 k:3\r\n"},
		{"text-set", Text, true, []uint64{4}, "set k:4 0 0 3\r\nabc\r\n"},
		{"meta-get", Meta, false, []uint64{1}, "mg k:1 v k\r\n"},
		{"meta-multiget", Meta, false, []uint64{1, 2}, "mg k:1 v k q\r\nmg k:2 v k q\r\nmn\r\n"},
		{"meta-set", Meta, true, []uint64{4}, "ms k:4 3\r\nabc\r\n"},
		{"binary-get", Binary, false, []uint64{1}, "" +
			"\x80\x0c\x00\x03" + // magic, GETK, key length 3
			"\x00\x00\x00\x00" + // extras 0, data type, vbucket
			"\x00\x00\x00\x03" + // body length
			"\x00\x00\x00\x00" + // opaque 0
			"\x00\x00\x00\x00\x00\x00\x00\x00" + // cas
			"k:1"},
		{"binary-multiget", Binary, false, []uint64{1, 2}, "" +
			"\x80\x0d\x00\x03\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00k:1" + // GETKQ, opaque 0
			"\x80\x0c\x00\x03\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00k:2"}, // GETK, opaque 1
		{"binary-set", Binary, true, []uint64{4}, "" +
			"\x80\x01\x00\x03" + // magic, SET, key length 3
			"\x08\x00\x00\x00" + // extras 8, data type, vbucket
			"\x00\x00\x00\x0e" + // body 8+3+3
			"\x00\x00\x00\x00" + // opaque
			"\x00\x00\x00\x00\x00\x00\x00\x00" + // cas
			"\x00\x00\x00\x00\x00\x00\x00\x00" + // flags, exptime
			"k:4abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := testWire(tc.proto)
			var got []byte
			if tc.set {
				got = w.appendSet(nil, tc.keys[0])
			} else {
				got = w.appendGet(nil, tc.keys)
			}
			if string(got) != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// binResp builds a response packet: header fields, then extras, key, value.
func binResp(op byte, status uint16, key, value string) string {
	ext := ""
	if status == 0 && (op == 0x0c || op == 0x0d) {
		ext = "\x00\x00\x00\x00" // flags
	}
	body := len(ext) + len(key) + len(value)
	h := []byte{0x81, op, 0, byte(len(key)), byte(len(ext)), 0, byte(status >> 8), byte(status),
		0, 0, byte(body >> 8), byte(body), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	return string(h) + ext + key + value
}

func TestReplyParsingGolden(t *testing.T) {
	for _, tc := range []struct {
		name    string
		proto   Protocol
		op      opKind
		keys    []uint64
		in      string
		want    reply
		wantErr bool
		rest    string // what must be left unread
	}{
		{"text-stored", Text, opSet, []uint64{1}, "STORED\r\nX", reply{}, false, "X"},
		{"text-not-stored", Text, opSet, []uint64{1}, "NOT_STORED\r\n", reply{bad: 1}, false, ""},
		{"text-server-error", Text, opSet, []uint64{1}, "SERVER_ERROR out of memory storing object\r\n", reply{bad: 1}, false, ""},
		{"text-hit", Text, opGet, []uint64{1}, "VALUE k:1 0 3\r\nabc\r\nEND\r\nX", reply{hits: 1}, false, "X"},
		{"text-hit-cas", Text, opGet, []uint64{1}, "VALUE k:1 0 3 77\r\nabc\r\nEND\r\n", reply{hits: 1}, false, ""},
		{"text-miss", Text, opGet, []uint64{1}, "END\r\n", reply{misses: 1}, false, ""},
		{"text-multi", Text, opGet, []uint64{1, 2, 3}, "VALUE k:1 0 3\r\nabc\r\nVALUE k:3 5 3\r\nabc\r\nEND\r\n", reply{hits: 2, misses: 1}, false, ""},
		{"text-wrong-key", Text, opGet, []uint64{1}, "VALUE k:2 0 3\r\nabc\r\nEND\r\n", reply{bad: 1}, false, ""},
		{"text-wrong-length", Text, opGet, []uint64{1}, "VALUE k:1 0 4\r\nabcd\r\nEND\r\n", reply{bad: 1}, false, ""},
		{"text-error", Text, opGet, []uint64{1, 2}, "ERROR\r\nX", reply{bad: 2}, false, "X"},
		{"text-garbled-data", Text, opGet, []uint64{1}, "VALUE k:1 0 3\r\nabcd\r\nEND\r\n", reply{hits: 1}, true, ""},
		{"text-garbled-line", Text, opGet, []uint64{1}, "VALUE k:1 0 x\r\n", reply{}, true, ""},
		{"text-eof", Text, opGet, []uint64{1}, "VALUE k:1 0 3\r\nab", reply{hits: 1}, true, ""},

		{"meta-hd", Meta, opSet, []uint64{1}, "HD\r\n", reply{}, false, ""},
		{"meta-ns", Meta, opSet, []uint64{1}, "NS\r\n", reply{bad: 1}, false, ""},
		{"meta-hit", Meta, opGet, []uint64{1}, "VA 3 kk:1\r\nabc\r\nX", reply{hits: 1}, false, "X"},
		{"meta-miss", Meta, opGet, []uint64{1}, "EN\r\nX", reply{misses: 1}, false, "X"},
		{"meta-miss-echo", Meta, opGet, []uint64{1}, "EN kk:1\r\nX", reply{misses: 1}, false, "X"},
		{"meta-wrong-key", Meta, opGet, []uint64{1}, "VA 3 kk:9\r\nabc\r\n", reply{bad: 1}, false, ""},
		{"meta-multi", Meta, opGet, []uint64{1, 2, 3}, "VA 3 kk:2\r\nabc\r\nMN\r\nX", reply{hits: 1, misses: 2}, false, "X"},
		{"meta-multi-error", Meta, opGet, []uint64{1, 2}, "CLIENT_ERROR bad command line format\r\nVA 3 kk:2\r\nabc\r\nMN\r\n", reply{hits: 1, bad: 1}, false, ""},
		{"meta-garbled", Meta, opGet, []uint64{1}, "VA x\r\n", reply{}, true, ""},

		{"binary-set-ok", Binary, opSet, []uint64{1}, binResp(0x01, 0, "", "") + "X", reply{}, false, "X"},
		{"binary-set-nomem", Binary, opSet, []uint64{1}, binResp(0x01, 0x82, "", "Out of memory"), reply{bad: 1}, false, ""},
		{"binary-hit", Binary, opGet, []uint64{1}, binResp(0x0c, 0, "k:1", "abc") + "X", reply{hits: 1}, false, "X"},
		{"binary-miss", Binary, opGet, []uint64{1}, binResp(0x0c, 1, "k:1", "Not found"), reply{misses: 1}, false, ""},
		{"binary-multi", Binary, opGet, []uint64{1, 2, 3},
			binResp(0x0d, 0, "k:1", "abc") + binResp(0x0c, 1, "k:3", "Not found"), reply{hits: 1, misses: 2}, false, ""},
		{"binary-multi-last-hit", Binary, opGet, []uint64{1, 2},
			binResp(0x0d, 0, "k:1", "abc") + binResp(0x0c, 0, "k:2", "abc"), reply{hits: 2}, false, ""},
		{"binary-wrong-length", Binary, opGet, []uint64{1}, binResp(0x0c, 0, "k:1", "abcd"), reply{bad: 1}, false, ""},
		{"binary-bad-magic", Binary, opGet, []uint64{1}, "\x80" + binResp(0x0c, 0, "k:1", "abc")[1:], reply{}, true, ""},
		{"binary-wrong-opcode", Binary, opGet, []uint64{1}, binResp(0x01, 0, "", ""), reply{}, true, ""},
		{"binary-short", Binary, opGet, []uint64{1}, "\x81\x0c", reply{}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := testWire(tc.proto)
			r := bufio.NewReader(strings.NewReader(tc.in))
			got, err := w.readReply(r, tc.op, tc.keys)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("reply %+v, want %+v", got, tc.want)
			}
			if !tc.wantErr {
				rest, _ := r.Peek(r.Buffered())
				if string(rest) != tc.rest {
					t.Errorf("left %q, want %q", rest, tc.rest)
				}
			}
		})
	}
}

func TestGarbledIsMarked(t *testing.T) {
	w := testWire(Text)
	_, err := w.readReply(bufio.NewReader(bytes.NewReader([]byte("VALUE k:1 0 z\r\n"))), opGet, []uint64{1})
	if !errors.Is(err, errGarbled) {
		t.Errorf("err %v is not errGarbled", err)
	}
}

func TestPicker(t *testing.T) {
	c := (&Config{KeyMax: 99, Ratio: Ratio{Set: 1, Get: 3}, Pattern: Sequential}).withDefaults()
	seen := map[uint64]int{}
	for conn := range 3 {
		p := newPicker(&c, conn, 3)
		for range 34 {
			seen[p.key()]++
		}
	}
	for k := range uint64(100) {
		if seen[k] == 0 {
			t.Fatalf("sequential: key %d never picked", k)
		}
	}
	p := newPicker(&c, 0, 1)
	sets := 0
	for range 400 {
		if p.isSet() {
			sets++
		}
	}
	if sets != 100 {
		t.Errorf("1:3 ratio gave %d sets of 400", sets)
	}
	c.Pattern = Gaussian
	p = newPicker(&c, 0, 1)
	mid := 0
	for range 10_000 {
		k := p.key()
		if k > 99 {
			t.Fatalf("gaussian key %d out of range", k)
		}
		if k >= 33 && k <= 66 {
			mid++
		}
	}
	if mid < 6000 { // ±1σ holds ~68%
		t.Errorf("gaussian: only %d of 10000 within one stddev", mid)
	}
}
