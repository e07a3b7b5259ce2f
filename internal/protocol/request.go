package protocol

import "bytes"

// Cmd is a text request's command (the verb of its line).
type Cmd uint8

// The text commands memcached 1.6.18 knows (and the node serves). The
// proxy serves a subset and answers the rest as unknown.
const (
	CmdUnknown Cmd = iota // a verb memcached does not know: "ERROR"
	CmdGet                // get, bget
	CmdGets
	CmdGat
	CmdGats
	CmdSet
	CmdAdd
	CmdReplace
	CmdAppend
	CmdPrepend
	CmdCas
	CmdIncr
	CmdDecr
	CmdDelete
	CmdTouch
	CmdFlushAll
	CmdVersion
	CmdQuit
	CmdVerbosity
	CmdStats
	CmdShutdown
	CmdSlabs
	CmdCacheMemlimit
	CmdLruCrawler
	CmdLru
	CmdWatch
	CmdRefreshCerts
	CmdMetaGet    // mg
	CmdMetaSet    // ms
	CmdMetaDelete // md
	CmdMetaArith  // ma
	CmdMetaNoop   // mn
	CmdMetaDebug  // me
)

// TextRequest is one text request line, parsed by ParseTextRequest the way
// memcached's process_command and the process_*_command functions read
// it. Err, when set, is the reply memcached gives the request; each field
// is meaningful for the commands named beside it once Err is empty. A
// TextRequest is meant to be reused (one per connection): parsing allocates
// nothing, and Key and the tokens are views of the line (or of the
// TextRequest's own buffer, for a base64 meta key), valid until the next
// parse. Each parse sets every field; Meta only a meta command's.
type TextRequest struct {
	// Tokens is the line, tokenized; the commands without fields of their
	// own here (stats, slabs, lru, lru_crawler, watch, shutdown …) read
	// their arguments from it. A get's keys are T[First:N-1], then the
	// keys of each NextKeys.
	Tokens
	Cmd Cmd
	// Err is memcached's reply to a malformed request: "ERROR" for a
	// wrong number of tokens or an unknown verb, a CLIENT_ERROR line for
	// a bad field. A command's handler checks it where memcached would
	// (flush_all, for one, counts itself and refuses a disabled flush
	// before it looks at its exptime).
	Err string
	// Noreply is set by a classic command's trailing "noreply" (memcached's
	// set_noreply_maybe), before the fields are checked: memcached does
	// not answer its errors either. A meta command's q is Meta.NoReply.
	Noreply bool
	// Swallow, with Err, says that the data block of Bytes bytes follows
	// the line anyway and is to be discarded (ms, once its size is read).
	Swallow bool

	First   int    // get, gets, gat, gats: the index of the first key token
	Key     []byte // storage, incr, decr, delete, touch, meta: the key
	Flags   uint32 // storage: the client flags
	Exptime int32  // storage, gat, gats, touch, flush_all: the raw exptime
	Bytes   int    // storage, ms: the data block's length, "\r\n" included
	CAS     uint64 // cas: the compare value
	Delta   uint64 // incr, decr
	Level   uint32 // verbosity
	Meta    MetaFlags

	keyBuf [256]byte // a base64-decoded meta key
}

// Errors worded as memcached 1.6.18 words them.
const (
	ErrUnknown        = "ERROR"
	ErrBadExptime     = "CLIENT_ERROR invalid exptime argument"
	ErrBadDelta       = "CLIENT_ERROR invalid numeric delta argument"
	ErrDeleteUsage    = "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
	ErrMetaTooLong    = "CLIENT_ERROR options flags too long"
	ErrMetaGetTooLong = "CLIENT_ERROR options flags are too long"
	ErrMetaBadFlags   = "CLIENT_ERROR invalid or duplicate flag"
	ErrOpaqueTooLong  = "CLIENT_ERROR opaque token too long"
	ErrMetaSetMode    = "CLIENT_ERROR invalid mode for ms M token"
	ErrMetaArithMode  = "CLIENT_ERROR invalid mode for ma M token"
)

// maxDataLen is the largest data block length memcached reads (its vlen
// plus 2 must fit an int).
const maxDataLen = 1<<31 - 1 - 2

// ParseTextRequest parses line, a command line as TrimLine returns it, into r.
// It checks the number of tokens, the key's length and every numeric
// field, and nothing that needs the store or the connection (a get's
// keys past the first, which memcached checks one by one as it answers
// them, are the caller's: NextKeys).
func ParseTextRequest(line []byte, r *TextRequest) {
	Tokenize(line, &r.Tokens)
	r.Cmd, r.Err, r.Noreply, r.Swallow = CmdUnknown, "", false, false
	r.First, r.Key, r.Flags, r.Exptime = 0, nil, 0, 0
	r.Bytes, r.CAS, r.Delta, r.Level = 0, 0, 0, 0
	t := &r.Tokens
	if t.N < 2 || len(t.T[0]) < 2 {
		r.Err = ErrUnknown
		return
	}
	verb, n := t.T[0], t.N
	if verb[0] == 'm' && len(verb) == 2 {
		r.parseMeta(verb[1])
		return
	}
	switch string(verb) {
	case "get", "bget":
		r.Cmd = CmdGet
		r.parseGet(n, false)
	case "gets":
		r.Cmd = CmdGets
		r.parseGet(n, false)
	case "gat":
		r.Cmd = CmdGat
		r.parseGet(n, true)
	case "gats":
		r.Cmd = CmdGats
		r.parseGet(n, true)
	case "set":
		r.parseStore(CmdSet, n)
	case "add":
		r.parseStore(CmdAdd, n)
	case "replace":
		r.parseStore(CmdReplace, n)
	case "append":
		r.parseStore(CmdAppend, n)
	case "prepend":
		r.parseStore(CmdPrepend, n)
	case "cas":
		r.parseStore(CmdCas, n)
	case "incr":
		r.parseKeyNumber(CmdIncr, n)
	case "decr":
		r.parseKeyNumber(CmdDecr, n)
	case "touch":
		r.parseKeyNumber(CmdTouch, n)
	case "delete":
		r.parseDelete(n)
	case "flush_all":
		r.Cmd = CmdFlushAll
		if n < 2 || n > 4 {
			r.Err = ErrUnknown
			return
		}
		want := 2
		if r.setNoreply() {
			want = 3
		}
		if n != want {
			e, ok := ParseInt32(t.T[1])
			if !ok {
				r.Err = ErrBadExptime
				return
			}
			r.Exptime = e
		}
	case "version":
		r.Cmd = CmdVersion
	case "quit":
		r.Cmd = CmdQuit
	case "verbosity":
		r.Cmd = CmdVerbosity
		if n != 3 && n != 4 {
			r.Err = ErrUnknown
			return
		}
		r.setNoreply()
		lvl, ok := ParseUint32(t.T[1])
		if !ok {
			r.Err = ErrBadFormat
			return
		}
		r.Level = lvl
	case "stats":
		r.Cmd = CmdStats
	case "shutdown":
		r.Cmd = CmdShutdown
	case "slabs":
		r.Cmd = CmdSlabs
	case "cache_memlimit":
		r.Cmd = CmdCacheMemlimit
		if n != 3 && n != 4 {
			r.Err = ErrUnknown
		}
	case "lru_crawler":
		r.Cmd = CmdLruCrawler
	case "lru":
		r.Cmd = CmdLru
		if n < 3 {
			r.Err = ErrUnknown
		}
	case "watch":
		r.Cmd = CmdWatch
	case "refresh_certs":
		r.Cmd = CmdRefreshCerts
		r.setNoreply()
	default:
		r.Err = ErrUnknown
	}
}

// LooksHTTP reports whether the line ends like an HTTP request line ("GET
// / HTTP/1.1") and is not a meta command's: memcached closes such a
// connection instead of answering ERROR to a verb it does not know.
func (r *TextRequest) LooksHTTP() bool {
	if r.N < 2 {
		return false
	}
	if v := r.T[0]; len(v) < 2 || v[0] == 'm' && len(v) == 2 {
		return false
	}
	return bytes.HasPrefix(r.T[r.N-2], []byte("HTTP/"))
}

// Skip says how to discard the request's data block of Bytes bytes when
// the request is refused after its length was read (memcached's
// conn_swallow): used of the avail bytes buffered after the line now, and
// later more as they arrive.
func (r *TextRequest) Skip(avail int) (used, later int) {
	return min(r.Bytes, avail), max(r.Bytes-avail, 0)
}

// Refuse answers a request that did not parse with say(r.Err) and returns
// what to discard of what follows its line: nothing, or, when the error
// came once the data's length was known (Swallow), the data block (Skip).
func (r *TextRequest) Refuse(say func(string), avail int) (used, later int) {
	say(r.Err)
	if !r.Swallow {
		return 0, 0
	}
	return r.Skip(avail)
}

// NextKeys tokenizes the rest of a get's line that did not fit in the
// tokens (more than MaxTokens-1 of them) and reports whether there was
// any: the next keys are then T[First:N-1] (First is 0 from here on).
func (r *TextRequest) NextKeys() bool {
	if r.Rest == nil {
		return false
	}
	Tokenize(r.Rest, &r.Tokens)
	r.First = 0
	return true
}

// setNoreply is memcached's set_noreply_maybe: the token before the
// terminal one is "noreply".
func (r *TextRequest) setNoreply() bool {
	r.Noreply = r.N >= 2 && string(r.T[r.N-2]) == "noreply"
	return r.Noreply
}

// setKey takes T[1] as the key, refusing one longer than memcached takes.
func (r *TextRequest) setKey() bool {
	r.Key = r.T[1]
	if len(r.Key) > KeyMaxLength {
		r.Err = ErrBadFormat
		return false
	}
	return true
}

// parseGet is the part of process_get_command before the keys: at least
// one token after the verb and, for gat and gats, the exptime.
func (r *TextRequest) parseGet(n int, touch bool) {
	if n < 3 {
		r.Err = ErrUnknown
		return
	}
	r.First = 1
	if touch {
		e, ok := ParseInt32(r.T[1])
		if !ok {
			r.Err = ErrBadExptime
			return
		}
		r.Exptime, r.First = e, 2
	}
}

// parseStore is process_update_command's reading of its line:
// "<cmd> <key> <flags> <exptime> <bytes> [<cas>] [noreply]".
func (r *TextRequest) parseStore(c Cmd, n int) {
	r.Cmd = c
	if c == CmdCas {
		n-- // one more token
	}
	if n != 6 && n != 7 {
		r.Err = ErrUnknown
		return
	}
	r.setNoreply()
	if !r.setKey() {
		return
	}
	t := &r.Tokens
	flags, ok1 := ParseUint32(t.T[2])
	exp, ok2 := ParseInt32(t.T[3])
	vlen, ok3 := ParseInt32(t.T[4])
	if !ok1 || !ok2 || !ok3 {
		r.Err = ErrBadFormat
		return
	}
	r.Flags, r.Exptime, r.CAS = flags, exp, 0
	if c == CmdCas {
		v, ok := ParseUint64(t.T[5])
		if !ok {
			r.Err = ErrBadFormat
			return
		}
		r.CAS = v
	}
	if vlen < 0 || vlen > maxDataLen {
		r.Err = ErrBadFormat
		return
	}
	r.Bytes = int(vlen) + 2
}

// parseKeyNumber reads "incr|decr <key> <delta> [noreply]" and "touch
// <key> <exptime> [noreply]".
func (r *TextRequest) parseKeyNumber(c Cmd, n int) {
	r.Cmd = c
	if n != 4 && n != 5 {
		r.Err = ErrUnknown
		return
	}
	r.setNoreply()
	if !r.setKey() {
		return
	}
	if c == CmdTouch {
		e, ok := ParseInt32(r.T[2])
		if !ok {
			r.Err = ErrBadExptime
			return
		}
		r.Exptime = e
		return
	}
	d, ok := ParseUint64(r.T[2])
	if !ok {
		r.Err = ErrBadDelta
		return
	}
	r.Delta = d
}

// parseDelete is process_delete_command with 1.6.18's rules for the legacy
// "delete <key> 0" form: a third token must be "0" or "noreply", a fourth
// "noreply" after a "0". noreply is looked for only when there is a token
// after the key ("delete noreply" deletes the key "noreply").
func (r *TextRequest) parseDelete(n int) {
	r.Cmd = CmdDelete
	if n < 3 || n > 5 {
		r.Err = ErrUnknown
		return
	}
	if n > 3 {
		holdIsZero := string(r.T[2]) == "0"
		setsNoreply := r.setNoreply()
		valid := (n == 4 && (holdIsZero || setsNoreply)) || (n == 5 && holdIsZero && setsNoreply)
		if !valid {
			r.Err = ErrDeleteUsage
			return
		}
	}
	r.setKey()
}

// parseMeta reads the meta commands' lines: "m<c> <key> <flag>*", and ms's
// "ms <key> <datalen> <flag>*", with memcached's checks and wording for
// each (process_mget_command and its siblings): errors are sent whatever q
// says, since q is not in force until the flags are read.
func (r *TextRequest) parseMeta(c byte) {
	t := &r.Tokens
	switch c {
	case 'n':
		r.Cmd = CmdMetaNoop
		return
	case 'e':
		r.Cmd = CmdMetaDebug
		if t.N < 3 || len(t.T[1]) > KeyMaxLength {
			r.Err = ErrBadFormat
			return
		}
		r.Key = t.T[1]
		if t.N >= 4 && string(t.T[2]) == "b" {
			k, ok := Base64Decode(r.keyBuf[:0], r.Key)
			if !ok {
				r.Err = ErrBadFormat
				return
			}
			r.Key = k
		}
		return
	case 'g':
		r.Cmd = CmdMetaGet
	case 's':
		r.Cmd = CmdMetaSet
		r.parseMetaSet()
		return
	case 'd':
		r.Cmd = CmdMetaDelete
	case 'a':
		r.Cmd = CmdMetaArith
	default:
		r.Err = ErrUnknown
		return
	}
	if t.N < 3 {
		r.Err = ErrUnknown
		return
	}
	if len(t.T[1]) > KeyMaxLength {
		r.Err = ErrBadFormat
		return
	}
	if t.N > MetaMaxTokens {
		r.Err = ErrMetaTooLong
		if r.Cmd == CmdMetaGet {
			r.Err = ErrMetaGetTooLong
		}
		return
	}
	r.Meta = MetaFlags{}
	if r.Cmd == CmdMetaArith {
		r.Meta.Delta = 1
	}
	key, ok := ParseMetaFlags(t, 2, &r.Meta, r.keyBuf[:])
	if !ok {
		switch {
		case r.Cmd != CmdMetaGet:
			r.Err = ErrMetaBadFlags
		case r.Meta.Err != "":
			r.Err = r.Meta.Err
		default:
			r.Err = ErrBadFormat
		}
		return
	}
	r.Key = key
	if r.Cmd == CmdMetaArith {
		switch r.Meta.Mode { // memcached 1.6.18 takes upper case only
		case 0, 'I', '+', 'D', '-':
		default:
			r.Err = ErrMetaArithMode
		}
	}
}

// Decr reports whether an ma request decrements (mode D or -).
func (r *TextRequest) Decr() bool { return r.Meta.Mode == 'D' || r.Meta.Mode == '-' }

// parseMetaSet reads ms (process_mset_command): once the data length is
// known, an error also discards the data block (Swallow).
func (r *TextRequest) parseMetaSet() {
	t := &r.Tokens
	if t.N < 3 {
		r.Err = ErrUnknown
		return
	}
	if len(t.T[1]) > KeyMaxLength || t.N == 3 {
		r.Err = ErrBadFormat
		return
	}
	if t.N > MetaMaxTokens {
		r.Err = ErrMetaTooLong
		return
	}
	vlen, ok := ParseInt32(t.T[2])
	if !ok || vlen < 0 || vlen > maxDataLen {
		r.Err = ErrBadFormat
		return
	}
	r.Bytes = int(vlen) + 2
	r.Meta = MetaFlags{}
	key, ok := ParseMetaFlags(t, 3, &r.Meta, r.keyBuf[:])
	r.Key = key
	if !ok {
		r.Err, r.Swallow = r.Meta.Err, true
		if r.Err == "" {
			r.Err = ErrBadFormat
		}
		return
	}
	for i := 3; i < t.N-1; i++ {
		if tok := t.T[i]; tok[0] == 'O' && len(tok) > MetaMaxOpaqueLen {
			r.Err, r.Swallow = ErrOpaqueTooLong, true
			return
		}
	}
	switch r.Meta.Mode { // memcached 1.6.18 takes upper case only
	case 0, 'S', 'E', 'A', 'P', 'R':
	default:
		r.Err, r.Swallow = ErrMetaSetMode, true
	}
}
