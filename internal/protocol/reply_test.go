package protocol

import (
	"bytes"
	"testing"
)

var valueLineCases = []struct {
	name string
	line string
	ok   bool
	want ValueLine // all but the key
	key  string
}{
	{"plain", "VALUE k 5 3", true, ValueLine{Flags: 5, Size: 3}, "k"},
	{"cas", "VALUE k 5 3 9", true, ValueLine{Flags: 5, Size: 3, CAS: 9}, "k"},
	{"zeros", "VALUE k 00 000 0000", true, ValueLine{}, "k"},
	{"key-bytes-not-judged", "VALUE k\x00\r\t 0 1", true, ValueLine{Size: 1}, "k\x00\r\t"},
	// Separators: runs of spaces, and after the cas a single one.
	{"spaces-collapse", "VALUE   k  5   3", true, ValueLine{Flags: 5, Size: 3}, "k"},
	{"spaces-after-size", "VALUE k 5 3    ", true, ValueLine{Flags: 5, Size: 3}, "k"},
	{"one-space-after-cas", "VALUE k 5 3 9 ", true, ValueLine{Flags: 5, Size: 3, CAS: 9}, "k"},
	{"two-spaces-after-cas", "VALUE k 5 3 9  ", false, ValueLine{}, ""},
	{"tab-is-not-a-separator", "VALUE k\t0 1", false, ValueLine{}, ""},
	{"tab-after-size", "VALUE k 0 1\t", false, ValueLine{}, ""},
	{"cr-left-on", "VALUE k 0 1\r", false, ValueLine{}, ""},
	// Fields.
	{"no-key", "VALUE ", false, ValueLine{}, ""},
	{"malformed1", "VALUE k 0", false, ValueLine{}, ""},       // no size
	{"malformed2", "VALUE k x 1", false, ValueLine{}, ""},     // flags not a number
	{"malformed3", "VALUE k 0 1 2 3", false, ValueLine{}, ""}, // five fields
	{"malformed4", "VALUE k 0 1 x", false, ValueLine{}, ""},   // cas not a number
	// Numbers: plain decimal, in range.
	{"flags-max", "VALUE k 4294967295 1", true, ValueLine{Flags: 1<<32 - 1, Size: 1}, "k"},
	{"flags-overflow", "VALUE k 4294967296 1", false, ValueLine{}, ""},
	{"size-max", "VALUE k 0 2147483648", true, ValueLine{Size: 1 << 31}, "k"},
	{"size-overflow", "VALUE k 0 2147483649", false, ValueLine{}, ""},
	{"cas-max", "VALUE k 0 1 18446744073709551615", true, ValueLine{Size: 1, CAS: 1<<64 - 1}, "k"},
	{"cas-overflow", "VALUE k 0 1 18446744073709551616", false, ValueLine{}, ""},
	{"twenty-one-digits", "VALUE k 0 000000000000000000001", false, ValueLine{}, ""},
	{"sign", "VALUE k 0 +1", false, ValueLine{}, ""},
	{"negative-flags", "VALUE k -0 1", false, ValueLine{}, ""},
	// The word.
	{"no-space-after-VALUE", "VALUEk 0 1", false, ValueLine{}, ""},
	{"lower-case", "value k 0 1", false, ValueLine{}, ""},
	{"empty", "", false, ValueLine{}, ""},
}

func TestParseValueLine(t *testing.T) {
	for _, c := range valueLineCases {
		t.Run(c.name, func(t *testing.T) {
			v, ok := ParseValueLine([]byte(c.line))
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v (%+v)", ok, c.ok, v)
			}
			if !ok {
				return
			}
			if string(v.Key) != c.key || v.Flags != c.want.Flags || v.Size != c.want.Size || v.CAS != c.want.CAS {
				t.Fatalf("got key %q %+v, want key %q %+v", v.Key, v, c.key, c.want)
			}
		})
	}
}

func TestClassifyReply(t *testing.T) {
	for line, want := range map[string]ReplyKind{
		"VALUE k 0 1":            ReplyValue,
		"VALUE ":                 ReplyValue, // recognised; ParseValueLine refuses it
		"VALUE":                  ReplyUnknown,
		"END":                    ReplyEnd,
		"END ":                   ReplyUnknown,
		"STORED":                 ReplyStored,
		"NOT_STORED":             ReplyNotStored,
		"EXISTS":                 ReplyExists,
		"NOT_FOUND":              ReplyNotFound,
		"DELETED":                ReplyDeleted,
		"TOUCHED":                ReplyTouched,
		"OK":                     ReplyOK,
		"VERSION 1.6.18":         ReplyVersion,
		"VERSION":                ReplyVersion,
		"ERROR":                  ReplyError,
		"ERROR unknown":          ReplyUnknown,
		"CLIENT_ERROR bad":       ReplyClientError,
		"SERVER_ERROR no memory": ReplyServerError,
		"SERVER_ERROR":           ReplyServerError,
		"SERVER_ERRORx":          ReplyServerError, // by its start, as every client reads it
		"stored":                 ReplyUnknown,
		"42":                     ReplyUnknown,
		"HD":                     ReplyUnknown,
		"":                       ReplyUnknown,
	} {
		if got := ClassifyReply([]byte(line)); got != want {
			t.Errorf("ClassifyReply(%q) = %v, want %v", line, got, want)
		}
	}
	for k := ReplyUnknown; k <= ReplyServerError; k++ {
		if want := k >= ReplyError; k.IsError() != want {
			t.Errorf("%v.IsError() = %v", k, !want)
		}
	}
}

func TestParseIncrReply(t *testing.T) {
	for _, c := range []struct {
		line string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"42", 42, true},
		{"42   ", 42, true}, // trailing spaces are allowed
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false},
		{" 42", 0, false},
		{"4 2", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"42\r", 0, false},
		{"NOT_FOUND", 0, false},
		{"", 0, false},
		{"   ", 0, false},
	} {
		if got, ok := ParseIncrReply([]byte(c.line)); got != c.want || ok != c.ok {
			t.Errorf("ParseIncrReply(%q) = %d, %v, want %d, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

var metaReplyCases = []struct {
	name  string
	line  string
	code  MetaCode
	ok    bool
	size  int
	flags string
}{
	{"hit", "VA 3 kk:1 f5", MetaVA, true, 3, " kk:1 f5"},
	{"hit-no-flags", "VA 0", MetaVA, true, 0, ""},
	{"hit-spaces", "VA   3  t-1", MetaVA, true, 3, "  t-1"},
	{"hit-size-max", "VA 2147483648", MetaVA, true, 1 << 31, ""},
	{"hit-no-size", "VA", MetaVA, false, 0, ""},
	{"hit-bad-size", "VA x kk", MetaVA, false, 0, ""},
	{"hit-signed-size", "VA +3", MetaVA, false, 0, ""},
	{"hit-size-overflow", "VA 2147483649", MetaVA, false, 0, ""},
	{"done", "HD", MetaHD, true, 0, ""},
	{"done-flags", "HD c77 kk:1", MetaHD, true, 0, " c77 kk:1"},
	{"not-found", "NF", MetaNF, true, 0, ""},
	{"not-stored", "NS", MetaNS, true, 0, ""},
	{"exists", "EX c1", MetaEX, true, 0, " c1"},
	{"miss", "EN", MetaEN, true, 0, ""},
	{"miss-echo", "EN kk:1 O9", MetaEN, true, 0, " kk:1 O9"},
	{"noop", "MN", MetaMN, true, 0, ""},
	{"noop-with-flags", "MN x", MetaMN, false, 0, ""},
	{"code-run-on", "VA3", MetaUnknown, false, 0, ""},
	{"unknown-code", "XY", MetaUnknown, false, 0, ""},
	{"lower-case", "hd", MetaUnknown, false, 0, ""},
	{"error", "CLIENT_ERROR bad command line format", MetaUnknown, false, 0, ""},
	{"one-letter", "E", MetaUnknown, false, 0, ""},
	{"empty", "", MetaUnknown, false, 0, ""},
}

func TestParseMetaReply(t *testing.T) {
	for _, c := range metaReplyCases {
		t.Run(c.name, func(t *testing.T) {
			m, ok := ParseMetaReply([]byte(c.line))
			if m.Code != c.code || ok != c.ok {
				t.Fatalf("code %v ok %v, want %v %v", m.Code, ok, c.code, c.ok)
			}
			if ok && (m.Size != c.size || string(m.Flags) != c.flags) {
				t.Fatalf("size %d flags %q, want %d %q", m.Size, m.Flags, c.size, c.flags)
			}
		})
	}
}

func TestMetaReplyFlag(t *testing.T) {
	m, ok := ParseMetaReply([]byte("VA 3  kk:1 f5 c  t-1 k2"))
	if !ok {
		t.Fatal("not parsed")
	}
	for _, c := range []struct {
		flag byte
		want string
		ok   bool
	}{
		{'k', "2", true}, // given twice: the last counts
		{'f', "5", true},
		{'c', "", true}, // a flag without a value
		{'t', "-1", true},
		{'s', "", false},
		{' ', "", false},
	} {
		if got, ok := m.Flag(c.flag); string(got) != c.want || ok != c.ok {
			t.Errorf("Flag(%q) = %q, %v, want %q, %v", c.flag, got, ok, c.want, c.ok)
		}
	}
	if MetaVA.String() != "VA" || MetaMN.String() != "MN" || MetaUnknown.String() != "MetaCode(0)" ||
		ReplyServerError.String() != "SERVER_ERROR" || ReplyKind(99).String() != "ReplyKind(99)" {
		t.Error("String")
	}
}

// FuzzParseValueLine: ParseValueLine never panics, a line it takes is
// one ClassifyReply calls a value line, its key is a non-empty run of
// non-space bytes of the line, and writing the fields back out in
// memcached's form parses to the same fields.
func FuzzParseValueLine(f *testing.F) {
	for _, c := range valueLineCases {
		f.Add([]byte(c.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		v, ok := ParseValueLine(line)
		if !ok {
			return
		}
		if ClassifyReply(line) != ReplyValue {
			t.Fatalf("%q parsed, classified %v", line, ClassifyReply(line))
		}
		if len(v.Key) == 0 || bytes.IndexByte(v.Key, ' ') >= 0 || !bytes.Contains(line, v.Key) {
			t.Fatalf("%q: key %q", line, v.Key)
		}
		if v.Size < 0 || v.Size > 1<<31 {
			t.Fatalf("%q: size %d", line, v.Size)
		}
		out := append([]byte("VALUE "), v.Key...)
		out = append(out, ' ')
		out = AppendUint(out, uint64(v.Flags))
		out = append(out, ' ')
		out = AppendUint(out, uint64(v.Size))
		if v.CAS != 0 {
			out = append(out, ' ')
			out = AppendUint(out, v.CAS)
		}
		w, ok := ParseValueLine(out)
		if !ok || !bytes.Equal(w.Key, v.Key) || w.Flags != v.Flags || w.Size != v.Size || w.CAS != v.CAS {
			t.Fatalf("%q parsed to %+v; written back as %q it parses to %+v, %v", line, v, out, w, ok)
		}
	})
}

// FuzzParseMetaReply: ParseMetaReply and Flag never panic, a line taken
// as a VA has a size in range and writing it back out parses the same,
// and the other readers of reply lines never panic on it either.
func FuzzParseMetaReply(f *testing.F) {
	for _, c := range metaReplyCases {
		f.Add([]byte(c.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ClassifyReply(line)
		ParseIncrReply(line)
		m, ok := ParseMetaReply(line)
		for _, c := range []byte("kfcst ") {
			m.Flag(c)
		}
		if !ok {
			return
		}
		if m.Code == MetaUnknown || m.Size < 0 || m.Size > 1<<31 || m.Code != MetaVA && m.Size != 0 {
			t.Fatalf("%q: %+v", line, m)
		}
		out := []byte(m.Code.String())
		if m.Code == MetaVA {
			out = append(out, ' ')
			out = AppendUint(out, uint64(m.Size))
		}
		out = append(out, m.Flags...)
		n, ok := ParseMetaReply(out)
		if !ok || n.Code != m.Code || n.Size != m.Size || !bytes.Equal(n.Flags, m.Flags) {
			t.Fatalf("%q parsed to %+v; written back as %q it parses to %+v, %v", line, m, out, n, ok)
		}
	})
}

func BenchmarkParseValueLine(b *testing.B) {
	line := []byte("VALUE key:0012345 0 100 123456789")
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if ClassifyReply(line) != ReplyValue {
			b.Fatal("not a value line")
		}
		if v, ok := ParseValueLine(line); !ok || v.Size != 100 {
			b.Fatal(v, ok)
		}
	}
}

func BenchmarkParseMetaReply(b *testing.B) {
	line := []byte("VA 100 kkey:0012345 f0 c123456789")
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		m, ok := ParseMetaReply(line)
		if !ok || m.Size != 100 {
			b.Fatal(m, ok)
		}
		if k, ok := m.Flag('k'); !ok || len(k) != 11 {
			b.Fatal(k, ok)
		}
	}
}
