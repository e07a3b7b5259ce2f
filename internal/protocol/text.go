// Package protocol holds vbcache's wire codecs: pure functions over byte
// slices, with no sockets and no store.
//
// The text protocol (classic and meta commands) is memcached's, and
// memcached's parser has quirks that clients and tests depend on, so the
// pieces here reproduce them exactly rather than "cleaning them up":
//
//   - A command line ends at '\n'; a '\r' just before it is dropped. The line
//     is then a C string to memcached, so it also ends at its first NUL byte
//     (TrimLine).
//   - Tokens are separated by spaces only (not tabs). At most MaxTokens-1
//     tokens are split off; whatever follows is left as the "rest" for the
//     caller (multi-key gets loop over it). See Tokenize.
//   - Numbers are read with C's strtol/strtoul/strtoull semantics and then
//     narrowed as memcached narrows them: leading white space and a sign are
//     accepted, a number must be followed by the end of the token or white
//     space, a 32-bit field silently keeps the low 32 bits of a 64-bit
//     parse, and a negative unsigned number is refused only when it wraps
//     to a value with the top bit set (ParseInt32, ParseUint32,
//     ParseUint64).
//
// On these, ParseTextRequest (request.go) is memcached's request grammar:
// it turns a line into a TextRequest (the command, its key, flags,
// exptime, data length, cas, delta, noreply and meta flags) or into the
// exact error memcached answers, so the node, the proxy and its event
// loops keep only what to do with a request.
//
// Replies go the other way (reply.go): the Go client, the proxy's event
// loop and the load generator read what a server answers with
// ClassifyReply, ParseValueLine, ParseIncrReply and ParseMetaReply. That
// grammar is the Go client's, stricter than memcached's request parser
// (numbers are plain decimal), and a reader that meets a line it refuses
// stops trusting the stream. The binary protocol's header codec, opcodes
// and statuses are in binary.go.
//
// Nothing here allocates: tokens are sub-slices of the caller's line.
package protocol

import "bytes"

// MaxTokens is memcached's MAX_TOKENS: a line is split into at most
// MaxTokens-1 tokens plus the terminal token (the unparsed rest).
const MaxTokens = 24

// KeyMaxLength is the longest key memcached accepts.
const KeyMaxLength = 250

// LineMaxNoNewline is how many bytes a connection may buffer without a
// newline before memcached decides the line is garbage (unless it is a
// multi-key get).
const LineMaxNoNewline = 2048

// Tokens is the result of Tokenize. N counts the tokens including memcached's
// terminal token, so the numbers compared against it match memcached's
// ntokens (e.g. "set k 0 0 1" has N == 6).
type Tokens struct {
	T [MaxTokens][]byte
	N int
	// Rest is what remains unsplit when the line had more than
	// MaxTokens-1 tokens (memcached's terminal token value), or nil.
	Rest []byte
}

// Count returns the number of real tokens (without the terminal one).
func (t *Tokens) Count() int { return t.N - 1 }

// Tokenize splits line on spaces as memcached's tokenize_command does.
func Tokenize(line []byte, t *Tokens) {
	n, i := 0, 0
	t.Rest = nil
	for n < MaxTokens-1 {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		if i >= len(line) {
			break
		}
		j := bytes.IndexByte(line[i:], ' ')
		if j < 0 {
			t.T[n] = line[i:]
			n++
			i = len(line)
			break
		}
		t.T[n] = line[i : i+j]
		n++
		i += j + 1
	}
	// memcached stops splitting after MaxTokens-1 tokens; what follows the
	// single space after the last one (possibly more spaces) is the
	// terminal token's value. An empty rest means "fully scanned".
	if n == MaxTokens-1 && i < len(line) {
		t.Rest = line[i:]
	}
	t.T[n] = nil
	t.N = n + 1
}

// TrimLine turns the bytes before a '\n' into the C string memcached
// parses: a trailing '\r' is dropped (only when the line has more than one
// byte, as memcached checks) and the line ends at its first NUL.
func TrimLine(line []byte) []byte {
	if len(line) > 1 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	return line
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// strto parses like C's strtoull: optional leading white space, an optional
// sign, decimal digits. It returns the magnitude (wrapped as strtoull does
// for '-'), whether a '-' was seen, whether the magnitude overflowed 64 bits,
// and whether the token was acceptable to memcached's safe_strto* helpers
// (at least one digit, followed by the end or white space).
func strto(b []byte) (mag uint64, neg, overflow, ok bool) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		d := uint64(b[i] - '0')
		if mag > (^uint64(0)-d)/10 {
			overflow = true
		}
		mag = mag*10 + d
		i++
	}
	if i == start {
		return 0, neg, false, false
	}
	if i < len(b) && !isSpace(b[i]) && b[i] != 0 {
		return mag, neg, overflow, false
	}
	return mag, neg, overflow, true
}

// ParseUint64 is memcached's safe_strtoull.
func ParseUint64(b []byte) (uint64, bool) {
	mag, neg, overflow, ok := strto(b)
	if !ok || overflow {
		return 0, false
	}
	v := mag
	if neg {
		v = -mag
	}
	if int64(v) < 0 && bytes.IndexByte(b, '-') >= 0 {
		return 0, false
	}
	return v, true
}

// ParseInt64 is memcached's safe_strtoll.
func ParseInt64(b []byte) (int64, bool) {
	mag, neg, overflow, ok := strto(b)
	if !ok {
		return 0, false
	}
	if neg {
		if overflow || mag > 1<<63 {
			return 0, false
		}
		return -int64(mag), true
	}
	if overflow || mag > 1<<63-1 {
		return 0, false
	}
	return int64(mag), true
}

// ParseInt32 is memcached's safe_strtol on a 64-bit machine: strtol's long
// result is stored into an int32 without a range check, so only the low 32
// bits survive.
func ParseInt32(b []byte) (int32, bool) {
	v, ok := ParseInt64(b)
	if !ok {
		return 0, false
	}
	return int32(v), true
}

// ParseUint32 is memcached's safe_strtoul on a 64-bit machine: the unsigned
// long result keeps only its low 32 bits.
func ParseUint32(b []byte) (uint32, bool) {
	v, ok := ParseUint64(b)
	if !ok {
		return 0, false
	}
	return uint32(v), true
}

// AppendUint appends the decimal form of v.
func AppendUint(dst []byte, v uint64) []byte {
	var buf [20]byte
	i := len(buf)
	for v >= 10 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	i--
	buf[i] = byte('0' + v)
	return append(dst, buf[i:]...)
}

// AppendInt appends the decimal form of v.
func AppendInt(dst []byte, v int64) []byte {
	if v < 0 {
		dst = append(dst, '-')
		return AppendUint(dst, uint64(-v))
	}
	return AppendUint(dst, uint64(v))
}
