package protocol

import (
	"bytes"
	"strings"
	"testing"
)

func TestTokenize(t *testing.T) {
	cases := []struct {
		name string
		line string
		want []string // real tokens
		n    int      // memcached's ntokens (with the terminal token)
		rest string
	}{
		{"empty", "", nil, 1, ""},
		{"one", "version", []string{"version"}, 2, ""},
		{"set", "set k 0 0 1", []string{"set", "k", "0", "0", "1"}, 6, ""},
		{"spaces collapse", "  get   a  b ", []string{"get", "a", "b"}, 4, ""},
		{"tabs are not separators", "get\ta b", []string{"get\ta", "b"}, 3, ""},
		{"exactly 23 tokens", strings.Repeat("k ", 22) + "k", repeat("k", 23), 24, ""},
		{"rest after 23 tokens", strings.Repeat("k ", 23) + "x y", repeat("k", 23), 24, "x y"},
		{"rest is only spaces", strings.Repeat("k ", 23) + "  ", repeat("k", 23), 24, "  "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tk Tokens
			Tokenize([]byte(tc.line), &tk)
			if tk.N != tc.n {
				t.Fatalf("N = %d, want %d", tk.N, tc.n)
			}
			for i, w := range tc.want {
				if string(tk.T[i]) != w {
					t.Errorf("token %d = %q, want %q", i, tk.T[i], w)
				}
			}
			if string(tk.Rest) != tc.rest {
				t.Errorf("rest = %q, want %q", tk.Rest, tc.rest)
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestTrimLine(t *testing.T) {
	for in, want := range map[string]string{
		"get a\r":    "get a",
		"\r":         "\r", // a lone CR is kept: memcached checks len > 1
		"get a\x00b": "get a",
		"x\r\r":      "x\r",
	} {
		if got := TrimLine([]byte(in)); string(got) != want {
			t.Errorf("TrimLine(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseNumbers(t *testing.T) {
	u32 := []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"0", 0, true},
		{"4294967295", 4294967295, true},
		{"4294967296", 0, true}, // memcached keeps the low 32 bits
		{"-1", 0, false},
		{"-0", 0, true},
		{"+5", 5, true},
		{" 7", 7, true},
		{"7\r", 7, true},
		{"7x", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"99999999999999999999", 0, false}, // ERANGE
	}
	for _, c := range u32 {
		got, ok := ParseUint32([]byte(c.in))
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ParseUint32(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	i32 := []struct {
		in   string
		want int32
		ok   bool
	}{
		{"-1", -1, true},
		{"2147483647", 2147483647, true},
		{"4294967295", -1, true}, // truncation: "set k 0 0 4294967295" is a negative length
		{"9223372036854775807", -1, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775808", 0, true},
		{"abc", 0, false},
	}
	for _, c := range i32 {
		got, ok := ParseInt32([]byte(c.in))
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ParseInt32(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	u64 := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"18446744073709551615", 18446744073709551615, true},
		{"18446744073709551616", 0, false},
		{"-1", 0, false},
		{"-9223372036854775808", 0, false},
		{"-5", 0, false},
		{"12 ", 12, true},
		{"12\x00zz", 12, true},
	}
	for _, c := range u64 {
		got, ok := ParseUint64([]byte(c.in))
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ParseUint64(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestBase64(t *testing.T) {
	for _, s := range []string{"", "a", "ab", "abc", "abcd", "\x00\xff\r\n key"} {
		enc := Base64Encode(nil, []byte(s))
		dec, ok := Base64Decode(nil, enc)
		if s == "" {
			if ok {
				t.Errorf("decoding the empty string succeeded")
			}
			continue
		}
		if !ok || string(dec) != s {
			t.Errorf("round trip of %q: %q, %v (encoded %q)", s, dec, ok, enc)
		}
	}
	bad := []string{"abc", "====", "a===", "!!!!"}
	for _, s := range bad {
		if d, ok := Base64Decode(nil, []byte(s)); ok {
			t.Errorf("Base64Decode(%q) = %q, want failure", s, d)
		}
	}
	// Bytes outside the alphabet are skipped, as memcached does.
	if d, ok := Base64Decode(nil, []byte("Zm9v!")); !ok || string(d) != "foo" {
		t.Errorf("Base64Decode(Zm9v!) = %q, %v", d, ok)
	}
}

func TestParseMetaFlags(t *testing.T) {
	parse := func(line string) (MetaFlags, string, bool) {
		var tk Tokens
		Tokenize([]byte(line), &tk)
		var f MetaFlags
		var kb [512]byte
		key, ok := ParseMetaFlags(&tk, 2, &f, kb[:])
		return f, string(key), ok
	}
	f, key, ok := parse("mg foo v k s t c f O123 T30 N10 R5 q u h l")
	if !ok || key != "foo" || !f.Value || !f.NoReply || !f.NoUpdate || f.Exptime != 30 || f.VivifyTTL != 10 || !f.HasRecache || f.Recache != 5 {
		t.Errorf("full mg parse: %+v %q %v", f, key, ok)
	}
	if _, _, ok := parse("mg foo v v"); ok {
		t.Error("duplicate flag accepted")
	}
	if f, _, ok := parse("mg foo x"); ok || f.Err != ErrMetaInvalid {
		t.Errorf("invalid flag: %v %q", ok, f.Err)
	}
	if f, _, ok := parse("mg foo Tabc"); ok || f.Err != ErrMetaBadToken {
		t.Errorf("bad T: %v %q", ok, f.Err)
	}
	if f, key, ok := parse("mg Zm9v b"); !ok || key != "foo" || !f.KeyBinary {
		t.Errorf("b: %v %q %v", ok, key, f.KeyBinary)
	}
	if f, _, ok := parse("mg Zm9 b"); ok || f.Err != ErrMetaDecodeKey {
		t.Errorf("bad b: %v %q", ok, f.Err)
	}
	if f, _, ok := parse("ma foo MI1"); ok || f.Err != ErrMetaModeLength {
		t.Errorf("long M: %v %q", ok, f.Err)
	}
	if f, _, ok := parse("ma foo Dx"); ok || f.Err != ErrMetaDelta {
		t.Errorf("bad D: %v %q", ok, f.Err)
	}
	if f, _, ok := parse("ma foo J-1"); ok || f.Err != ErrMetaInitial {
		t.Errorf("bad J: %v %q", ok, f.Err)
	}
}

// FuzzParseText checks that the text tokenizer, number parsers and meta flag
// pre-parser never panic and keep their invariants on any line.
func FuzzParseText(f *testing.F) {
	for _, s := range []string{
		"get a b c", "set k 0 0 5 noreply", "mg foo v k s t c f O123 T30 N10 R5 q",
		"ms Zm9v 3 b T-1 F4294967296 MS I C123", "ma k MD D18446744073709551615 J1 N0",
		"md k q I T30 C1 Oabc k", strings.Repeat("k ", 40), "\x00\xff\r", "mg " + strings.Repeat("a", 300) + " b",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		line = TrimLine(line)
		var tk Tokens
		Tokenize(line, &tk)
		if tk.N < 1 || tk.N > MaxTokens {
			t.Fatalf("N = %d", tk.N)
		}
		total := 0
		for i := 0; i < tk.N-1; i++ {
			if len(tk.T[i]) == 0 || bytes.IndexByte(tk.T[i], ' ') >= 0 {
				t.Fatalf("bad token %q", tk.T[i])
			}
			total += len(tk.T[i])
			ParseUint32(tk.T[i])
			ParseInt32(tk.T[i])
			ParseUint64(tk.T[i])
		}
		if total+len(tk.Rest) > len(line) {
			t.Fatalf("tokens longer than the line")
		}
		if tk.N >= 3 {
			var mf MetaFlags
			var kb [512]byte
			if len(tk.T[1]) <= KeyMaxLength {
				key, _ := ParseMetaFlags(&tk, 2, &mf, kb[:])
				if len(key) > len(tk.T[1]) {
					t.Fatalf("decoded key longer than its encoding")
				}
			}
		}
		enc := Base64Encode(nil, line)
		if len(line) > 0 {
			dec, ok := Base64Decode(nil, enc)
			if !ok || !bytes.Equal(dec, line) {
				t.Fatalf("base64 round trip failed for %q", line)
			}
		}
	})
}
