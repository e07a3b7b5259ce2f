package protocol

import (
	"strings"
	"testing"
)

func TestParseTextRequest(t *testing.T) {
	long := strings.Repeat("k", KeyMaxLength+1)
	cases := []struct {
		line string
		want TextRequest // the fields compared: Cmd Err Noreply Swallow Key Flags Exptime Bytes CAS Delta Level First
	}{
		{"", TextRequest{Err: ErrUnknown}},
		{"g", TextRequest{Err: ErrUnknown}},
		{"nosuch a b", TextRequest{Err: ErrUnknown}},
		{"get", TextRequest{Cmd: CmdGet, Err: ErrUnknown}},
		{"get a b", TextRequest{Cmd: CmdGet, First: 1}},
		{"bget a", TextRequest{Cmd: CmdGet, First: 1}},
		{"gets a", TextRequest{Cmd: CmdGets, First: 1}},
		{"gat 10 a", TextRequest{Cmd: CmdGat, Exptime: 10, First: 2}},
		{"gats x a", TextRequest{Cmd: CmdGats, Err: ErrBadExptime}},
		{"set k 5 -1 3", TextRequest{Cmd: CmdSet, Key: []byte("k"), Flags: 5, Exptime: -1, Bytes: 5}},
		{"add k 0 0 3 noreply", TextRequest{Cmd: CmdAdd, Key: []byte("k"), Bytes: 5, Noreply: true}},
		{"replace k 0 0", TextRequest{Cmd: CmdReplace, Err: ErrUnknown}},
		{"append k x 0 3", TextRequest{Cmd: CmdAppend, Key: []byte("k"), Err: ErrBadFormat}},
		{"prepend k 0 0 -1 noreply", TextRequest{Cmd: CmdPrepend, Key: []byte("k"), Err: ErrBadFormat, Noreply: true}},
		{"set " + long + " 0 0 1", TextRequest{Cmd: CmdSet, Key: []byte(long), Err: ErrBadFormat}},
		{"cas k 0 0 3 77", TextRequest{Cmd: CmdCas, Key: []byte("k"), Bytes: 5, CAS: 77}},
		{"cas k 0 0 3", TextRequest{Cmd: CmdCas, Err: ErrUnknown}},
		{"cas k 0 0 3 x", TextRequest{Cmd: CmdCas, Key: []byte("k"), Err: ErrBadFormat}},
		{"incr k 3", TextRequest{Cmd: CmdIncr, Key: []byte("k"), Delta: 3}},
		{"decr k -3 noreply", TextRequest{Cmd: CmdDecr, Key: []byte("k"), Err: ErrBadDelta, Noreply: true}},
		{"touch k 9", TextRequest{Cmd: CmdTouch, Key: []byte("k"), Exptime: 9}},
		{"touch k z", TextRequest{Cmd: CmdTouch, Key: []byte("k"), Err: ErrBadExptime}},
		{"delete noreply", TextRequest{Cmd: CmdDelete, Key: []byte("noreply")}},
		{"delete k 0", TextRequest{Cmd: CmdDelete, Key: []byte("k")}},
		{"delete k noreply", TextRequest{Cmd: CmdDelete, Key: []byte("k"), Noreply: true}},
		{"delete k 0 noreply", TextRequest{Cmd: CmdDelete, Key: []byte("k"), Noreply: true}},
		{"delete k 5", TextRequest{Cmd: CmdDelete, Err: ErrDeleteUsage}},
		{"delete k 5 noreply", TextRequest{Cmd: CmdDelete, Err: ErrDeleteUsage, Noreply: true}},
		{"flush_all", TextRequest{Cmd: CmdFlushAll}},
		{"flush_all noreply", TextRequest{Cmd: CmdFlushAll, Noreply: true}},
		{"flush_all 10", TextRequest{Cmd: CmdFlushAll, Exptime: 10}},
		{"flush_all x noreply", TextRequest{Cmd: CmdFlushAll, Err: ErrBadExptime, Noreply: true}},
		{"verbosity 1", TextRequest{Cmd: CmdVerbosity, Level: 1}},
		{"verbosity x", TextRequest{Cmd: CmdVerbosity, Err: ErrBadFormat}},
		{"cache_memlimit", TextRequest{Cmd: CmdCacheMemlimit, Err: ErrUnknown}},
		{"lru", TextRequest{Cmd: CmdLru, Err: ErrUnknown}},
		{"refresh_certs noreply", TextRequest{Cmd: CmdRefreshCerts, Noreply: true}},
		{"mn", TextRequest{Cmd: CmdMetaNoop}},
		{"mz k", TextRequest{Err: ErrUnknown}},
		{"mg", TextRequest{Cmd: CmdMetaGet, Err: ErrUnknown}},
		{"mg k v", TextRequest{Cmd: CmdMetaGet, Key: []byte("k")}},
		{"mg " + long + " v", TextRequest{Cmd: CmdMetaGet, Err: ErrBadFormat}},
		{"mg k v v", TextRequest{Cmd: CmdMetaGet, Err: ErrMetaDuplicate}},
		{"md k v v", TextRequest{Cmd: CmdMetaDelete, Err: ErrMetaBadFlags}},
		{"mg k" + strings.Repeat(" v", MetaMaxTokens), TextRequest{Cmd: CmdMetaGet, Err: ErrMetaGetTooLong}},
		{"ma k" + strings.Repeat(" v", MetaMaxTokens), TextRequest{Cmd: CmdMetaArith, Err: ErrMetaTooLong}},
		{"mg a2V5 b v", TextRequest{Cmd: CmdMetaGet, Key: []byte("key")}},
		{"ma k MD", TextRequest{Cmd: CmdMetaArith, Key: []byte("k")}},
		{"ma k Mx", TextRequest{Cmd: CmdMetaArith, Key: []byte("k"), Err: ErrMetaArithMode}},
		{"ms k", TextRequest{Cmd: CmdMetaSet, Err: ErrBadFormat}},
		{"ms k x", TextRequest{Cmd: CmdMetaSet, Err: ErrBadFormat}},
		{"ms k 3 T5", TextRequest{Cmd: CmdMetaSet, Key: []byte("k"), Bytes: 5}},
		{"ms k 3 Mx", TextRequest{Cmd: CmdMetaSet, Key: []byte("k"), Bytes: 5, Err: ErrMetaSetMode, Swallow: true}},
		{"ms k 3 O" + strings.Repeat("o", MetaMaxOpaqueLen), TextRequest{Cmd: CmdMetaSet, Key: []byte("k"), Bytes: 5, Err: ErrOpaqueTooLong, Swallow: true}},
		{"ms k 3 Tx", TextRequest{Cmd: CmdMetaSet, Key: []byte("k"), Bytes: 5, Err: ErrMetaBadToken, Swallow: true}},
		{"me k", TextRequest{Cmd: CmdMetaDebug, Key: []byte("k")}},
		{"me a2V5 b", TextRequest{Cmd: CmdMetaDebug, Key: []byte("key")}},
		{"me", TextRequest{Cmd: CmdMetaDebug, Err: ErrBadFormat}},
		{"stats slabs", TextRequest{Cmd: CmdStats}},
	}
	var r TextRequest
	for _, tc := range cases {
		ParseTextRequest([]byte(tc.line), &r)
		w := &tc.want
		got := [...]any{r.Cmd, r.Err, r.Noreply, r.Swallow, string(r.Key), r.Bytes}
		want := [...]any{w.Cmd, w.Err, w.Noreply, w.Swallow, string(w.Key), w.Bytes}
		if got != want {
			t.Errorf("%q: got cmd, err, noreply, swallow, key, bytes %v, want %v", tc.line, got, want)
			continue
		}
		if r.Err != "" {
			continue
		}
		gotF := [...]any{r.Flags, r.Exptime, r.CAS, r.Delta, r.Level, r.First}
		wantF := [...]any{w.Flags, w.Exptime, w.CAS, w.Delta, w.Level, w.First}
		if gotF != wantF {
			t.Errorf("%q: got flags, exptime, cas, delta, level, first %v, want %v", tc.line, gotF, wantF)
		}
	}
}

func TestTextRequestKeys(t *testing.T) {
	var keys []string
	line := "get"
	for i := range 60 {
		line += " k" + string(rune('A'+i))
	}
	var r TextRequest
	ParseTextRequest([]byte(line), &r)
	for {
		for i := r.First; i < r.N-1; i++ {
			keys = append(keys, string(r.T[i]))
		}
		if !r.NextKeys() {
			break
		}
	}
	if len(keys) != 60 || keys[0] != "kA" || keys[59] != "k"+string(rune('A'+59)) {
		t.Fatalf("keys %d: %v", len(keys), keys)
	}
}

func TestTextRequestRefuse(t *testing.T) {
	var r TextRequest
	var said string
	say := func(s string) { said = s }
	// ms with a bad mode: the data block (3 bytes and CRLF) is discarded,
	// 2 bytes of it buffered now and 3 to come.
	ParseTextRequest([]byte("ms k 3 Mx"), &r)
	if used, later := r.Refuse(say, 2); used != 2 || later != 3 || said != ErrMetaSetMode {
		t.Errorf("ms Mx: used %d later %d said %q", used, later, said)
	}
	// A bad length: nothing is known to follow.
	ParseTextRequest([]byte("ms k x"), &r)
	if used, later := r.Refuse(say, 10); used != 0 || later != 0 || said != ErrBadFormat {
		t.Errorf("ms x: used %d later %d said %q", used, later, said)
	}
	// A classic storage command's errors never discard the data
	// (memcached reads it as the next command line).
	ParseTextRequest([]byte("set k x 0 3"), &r)
	if used, later := r.Refuse(say, 10); used != 0 || later != 0 {
		t.Errorf("set: used %d later %d", used, later)
	}
	// Skip on its own: everything buffered.
	ParseTextRequest([]byte("set k 0 0 3"), &r)
	if used, later := r.Skip(10); used != 5 || later != 0 {
		t.Errorf("skip: used %d later %d", used, later)
	}
}

func TestLooksHTTP(t *testing.T) {
	for line, want := range map[string]bool{
		"GET / HTTP/1.1":   true,
		"POST /x HTTP/1.0": true,
		"mg HTTP/1.1":      false, // a meta command's key
		"x HTTP/1.1":       false, // memcached: a verb of one byte is ERROR
		"GET / HTTX/1.1":   false,
	} {
		var r TextRequest
		ParseTextRequest([]byte(line), &r)
		if got := r.LooksHTTP(); got != want {
			t.Errorf("%q: LooksHTTP %v, want %v", line, got, want)
		}
	}
}

func TestParseTextRequestDoesNotAllocate(t *testing.T) {
	lines := [][]byte{
		[]byte("get a b c"), []byte("set k 0 0 10 noreply"), []byte("cas k 1 2 3 4"),
		[]byte("mg a2V5 b v c f t"), []byte("ms k 3 T5 F1 MS"), []byte("delete k 0 noreply"),
	}
	var r TextRequest
	if n := testing.AllocsPerRun(100, func() {
		for _, l := range lines {
			ParseTextRequest(l, &r)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}

// FuzzParseTextRequest checks that any line parses without a panic into a
// request whose fields keep memcached's limits.
func FuzzParseTextRequest(f *testing.F) {
	for _, s := range []string{"get a b", "set k 0 0 1 noreply", "cas k 0 0 1 2", "mg a2V5 b v", "ms k 2 MA I", "ma k MD D5 N0 J1", "delete k 0 noreply", "flush_all 0 noreply", "gat 1 a"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var r TextRequest
		ParseTextRequest(TrimLine(line), &r)
		if r.Err != "" {
			return
		}
		if len(r.Key) > KeyMaxLength {
			t.Fatalf("%q: key of %d bytes accepted", line, len(r.Key))
		}
		if (r.Cmd >= CmdSet && r.Cmd <= CmdCas || r.Cmd == CmdMetaSet) && (r.Bytes < 2 || r.Bytes > maxDataLen+2) {
			t.Fatalf("%q: data length %d", line, r.Bytes)
		}
		if r.Cmd == CmdUnknown {
			t.Fatalf("%q: unknown command without an error", line)
		}
		for r.NextKeys() {
		}
	})
}
