package protocol

import "bytes"

// The text reply grammar (memcached doc/protocol.txt), as the Go client,
// the proxy and the load generator read what a server answers. Every line
// ends with "\r\n"; the functions here take a line without it, because
// each caller frames lines its own way (a byte buffer, a bufio.Reader)
// and says in its own words what a bare '\n' means. The parsers do not
// allocate: keys and flags are sub-slices of the caller's line.
//
//	VALUE <key> <flags> <bytes>[ <cas>]    a hit: <bytes> of data and "\r\n" follow (ParseValueLine)
//	END                                    the end of a get's hits
//	STORED | NOT_STORED | EXISTS | NOT_FOUND
//	DELETED | TOUCHED | OK | VERSION <version>
//	<number>                               incr and decr (ParseIncrReply)
//	ERROR | CLIENT_ERROR <message> | SERVER_ERROR <message>
//
// and the meta commands' (ParseMetaReply):
//
//	VA <size> <flag>*                      a hit: <size> bytes of data and "\r\n" follow
//	HD <flag>* | NF <flag>* | NS <flag>* | EX <flag>* | EN <flag>*
//	MN
//
// Fields are separated by one or more spaces (a value line has one
// exception, see ParseValueLine). The numbers are plain decimal: no sign,
// no white space, no overflow, unlike the strtoul semantics of a
// request's numbers (ParseUint32), since a server that sends anything
// else is garbling its stream and the reader must stop trusting it
// rather than guess.

// ReplyKind is what a text reply line is, as ClassifyReply sees it.
type ReplyKind uint8

const (
	ReplyUnknown     ReplyKind = iota // none of those below: a number, a meta reply, garbage
	ReplyValue                        // "VALUE " and the rest of a value line (ParseValueLine)
	ReplyEnd                          // END
	ReplyStored                       // STORED
	ReplyNotStored                    // NOT_STORED
	ReplyExists                       // EXISTS: a cas whose item changed
	ReplyNotFound                     // NOT_FOUND
	ReplyDeleted                      // DELETED
	ReplyTouched                      // TOUCHED
	ReplyOK                           // OK (flush_all, verbosity)
	ReplyVersion                      // "VERSION" and anything after it
	ReplyError                        // ERROR: an unknown command
	ReplyClientError                  // "CLIENT_ERROR" and the message after it
	ReplyServerError                  // "SERVER_ERROR" and the message after it
)

var replyKindNames = [...]string{"unknown", "VALUE", "END", "STORED", "NOT_STORED", "EXISTS", "NOT_FOUND",
	"DELETED", "TOUCHED", "OK", "VERSION", "ERROR", "CLIENT_ERROR", "SERVER_ERROR"}

// String returns the reply word k stands for ("unknown" for ReplyUnknown).
func (k ReplyKind) String() string {
	if int(k) < len(replyKindNames) {
		return replyKindNames[k]
	}
	return "ReplyKind(" + string(AppendUint(nil, uint64(k))) + ")"
}

// IsError reports whether k is one of the error lines, ERROR,
// CLIENT_ERROR or SERVER_ERROR: an answer that ends any command's reply.
func (k ReplyKind) IsError() bool {
	return k == ReplyError || k == ReplyClientError || k == ReplyServerError
}

// ClassifyReply tells which reply line is line (without its "\r\n"). The
// status words must be the whole line; VALUE (with its space), VERSION,
// CLIENT_ERROR and SERVER_ERROR are recognised by their start, and the
// message after an error word is whatever follows it, as every client
// reads it. A value line is only recognised here: ParseValueLine checks
// its fields.
func ClassifyReply(line []byte) ReplyKind {
	if bytes.HasPrefix(line, []byte("VALUE ")) {
		return ReplyValue
	}
	switch string(line) {
	case "END":
		return ReplyEnd
	case "STORED":
		return ReplyStored
	case "NOT_STORED":
		return ReplyNotStored
	case "EXISTS":
		return ReplyExists
	case "NOT_FOUND":
		return ReplyNotFound
	case "DELETED":
		return ReplyDeleted
	case "TOUCHED":
		return ReplyTouched
	case "OK":
		return ReplyOK
	case "ERROR":
		return ReplyError
	}
	switch {
	case bytes.HasPrefix(line, []byte("SERVER_ERROR")):
		return ReplyServerError
	case bytes.HasPrefix(line, []byte("CLIENT_ERROR")):
		return ReplyClientError
	case bytes.HasPrefix(line, []byte("VERSION")):
		return ReplyVersion
	}
	return ReplyUnknown
}

// ValueLine is a parsed "VALUE <key> <flags> <bytes>[ <cas>]" line.
type ValueLine struct {
	Key   []byte // a sub-slice of the line
	Flags uint32
	Size  int    // the data's length in bytes, at most 1<<31
	CAS   uint64 // 0 when the line has none (memcached never hands out 0)
}

// ParseValueLine parses a value line without its "\r\n". It reports false
// unless the line starts with "VALUE " and has three or four fields after
// it: a key, flags that fit in 32 bits, a size of at most 1<<31 and
// optionally a 64-bit cas, each in plain decimal. Runs of spaces separate
// the fields and may precede the key; after three fields any number of
// spaces may follow, after the cas a single one. (That last rule is an
// accident of the parser the Go client always had, kept so that no reply
// it refused is now taken, or the reverse.)
func ParseValueLine(line []byte) (v ValueLine, ok bool) {
	if !bytes.HasPrefix(line, []byte("VALUE ")) {
		return v, false
	}
	l := line[len("VALUE "):]
	var f [4][]byte
	n := 0
	for len(l) > 0 && n < 4 {
		var tok []byte
		if i := bytes.IndexByte(l, ' '); i < 0 {
			tok, l = l, nil
		} else {
			tok, l = l[:i], l[i+1:]
		}
		if len(tok) > 0 {
			f[n] = tok
			n++
		}
	}
	if n < 3 || len(l) > 0 {
		return v, false
	}
	flags, ok1 := parseDecimal(f[1])
	size, ok2 := parseDecimal(f[2])
	if !ok1 || !ok2 || flags > 1<<32-1 || size > 1<<31 {
		return v, false
	}
	if n == 4 {
		if v.CAS, ok = parseDecimal(f[3]); !ok {
			return ValueLine{}, false
		}
	}
	v.Key, v.Flags, v.Size = f[0], uint32(flags), int(size)
	return v, true
}

// ParseIncrReply parses the reply to an incr or decr that found its item:
// the new value in plain decimal. Trailing spaces are allowed (memcached
// rewrites a shrinking counter in place, padded with spaces, and a client
// should not choke if they show up in a reply).
func ParseIncrReply(line []byte) (uint64, bool) {
	return parseDecimal(bytes.TrimRight(line, " "))
}

// MetaCode is a meta reply's two-letter code.
type MetaCode uint8

const (
	MetaUnknown MetaCode = iota // not a meta reply (an error line, garbage)
	MetaVA                      // VA <size> <flag>*: a hit; <size> bytes of data and "\r\n" follow
	MetaHD                      // HD <flag>*: done, no value (a stored ms, a deleted md, an mg without v)
	MetaNF                      // NF <flag>*: not found (md, ma)
	MetaNS                      // NS <flag>*: not stored (ms)
	MetaEX                      // EX <flag>*: the cas did not match (ms, md, ma)
	MetaEN                      // EN <flag>*: a get's miss (mg)
	MetaMN                      // MN: the answer to mn, the end of a pipeline of quiet commands
)

var metaCodes = [...]string{"", "VA", "HD", "NF", "NS", "EX", "EN", "MN"}

// String returns c's two letters ("MetaCode(0)" for MetaUnknown).
func (c MetaCode) String() string {
	if c == MetaUnknown || int(c) >= len(metaCodes) {
		return "MetaCode(" + string(AppendUint(nil, uint64(c))) + ")"
	}
	return metaCodes[c]
}

// MetaReply is a parsed meta reply line.
type MetaReply struct {
	Code MetaCode
	Size int // MetaVA: the data's length in bytes, at most 1<<31
	// Flags is the rest of the line after the code (and a VA's size):
	// the return flags, a letter each followed by its value
	// (" k<key> f<flags> c<cas>"). Flag looks one up.
	Flags []byte
}

// ParseMetaReply parses a meta reply line without its "\r\n": a code from
// the list above, then for VA a size in plain decimal, then return flags
// (none after MN).
// Code is set whenever the line starts with a known code followed by a
// space or the end of the line, even if what follows is bad; ok is false
// then, and for a line that is not a meta reply (Code MetaUnknown).
func ParseMetaReply(line []byte) (m MetaReply, ok bool) {
	if len(line) < 2 || len(line) > 2 && line[2] != ' ' {
		return m, false
	}
	for c := MetaVA; int(c) < len(metaCodes); c++ {
		if string(line[:2]) == metaCodes[c] {
			m.Code = c
			break
		}
	}
	rest := line[2:]
	switch m.Code {
	case MetaUnknown:
		return m, false
	case MetaMN:
		return m, len(rest) == 0
	case MetaVA:
		i := 0
		for i < len(rest) && rest[i] == ' ' {
			i++
		}
		j := i
		for j < len(rest) && rest[j] != ' ' {
			j++
		}
		size, good := parseDecimal(rest[i:j])
		if !good || size > 1<<31 {
			return m, false
		}
		m.Size, rest = int(size), rest[j:]
	}
	m.Flags = rest
	return m, true
}

// Flag returns the value of return flag f (the bytes after the letter),
// and whether the reply has it. A flag given twice counts as its last.
func (m *MetaReply) Flag(f byte) (value []byte, ok bool) {
	l := m.Flags
	for len(l) > 0 {
		i := bytes.IndexByte(l, ' ')
		tok := l
		if i >= 0 {
			tok, l = l[:i], l[i+1:]
		} else {
			l = nil
		}
		if len(tok) > 0 && tok[0] == f {
			value, ok = tok[1:], true
		}
	}
	return value, ok
}

// parseDecimal parses a plain decimal uint64: one to twenty digits and
// nothing else, without overflow.
func parseDecimal(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
