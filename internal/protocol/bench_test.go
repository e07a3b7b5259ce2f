package protocol

import "testing"

// The parsers run once per request; they must not allocate.

func BenchmarkTokenizeGet(b *testing.B) {
	line := []byte("get key:0012345")
	var t Tokens
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for i := 0; i < b.N; i++ {
		Tokenize(line, &t)
	}
	if t.N != 3 {
		b.Fatal(t.N)
	}
}

func BenchmarkTokenizeSet(b *testing.B) {
	line := []byte("set key:0012345 0 3600 100 noreply")
	var t Tokens
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for i := 0; i < b.N; i++ {
		Tokenize(line, &t)
		if _, ok := ParseUint32(t.T[2]); !ok {
			b.Fatal("flags")
		}
		if _, ok := ParseInt32(t.T[3]); !ok {
			b.Fatal("exptime")
		}
		if _, ok := ParseInt32(t.T[4]); !ok {
			b.Fatal("length")
		}
	}
}

// BenchmarkParseTextRequestGet and …Set cost what the node and the proxy
// pay per request line; BenchmarkTokenizeGet and …Set are the tokenizer
// (and number parsing) alone, the floor under them.
func BenchmarkParseTextRequestGet(b *testing.B) {
	line := []byte("get key:0012345")
	var r TextRequest
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for i := 0; i < b.N; i++ {
		ParseTextRequest(line, &r)
	}
	if r.Cmd != CmdGet || r.Err != "" {
		b.Fatal(r.Cmd, r.Err)
	}
}

func BenchmarkParseTextRequestSet(b *testing.B) {
	line := []byte("set key:0012345 0 3600 100 noreply")
	var r TextRequest
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for i := 0; i < b.N; i++ {
		ParseTextRequest(line, &r)
	}
	if r.Cmd != CmdSet || r.Err != "" || r.Bytes != 102 {
		b.Fatal(r.Cmd, r.Err, r.Bytes)
	}
}

func BenchmarkParseMetaFlags(b *testing.B) {
	line := []byte("mg key:0012345 v c f t s k O123 T30")
	var t Tokens
	var f MetaFlags
	var kb [512]byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Tokenize(line, &t)
		f = MetaFlags{}
		if _, ok := ParseMetaFlags(&t, 2, &f, kb[:]); !ok {
			b.Fatal(f.Err)
		}
	}
}

func BenchmarkParseRequest(b *testing.B) {
	pkt := AppendRequest(nil, &Request{Header: Header{Opcode: OpSet, Opaque: 1}, Extras: make([]byte, 8), Key: []byte("key:0012345"), Value: make([]byte, 100)})
	var r Request
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for i := 0; i < b.N; i++ {
		if n, err := ParseRequest(pkt, &r); n != len(pkt) || err != nil {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkAppendResponse(b *testing.B) {
	dst := make([]byte, 0, 256)
	val := make([]byte, 100)
	ext := []byte{0, 0, 0, 0}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		dst = AppendResponse(dst[:0], OpGet, StatusOK, 1, 2, ext, nil, val)
	}
}
