package protocol

// Meta command limits, as memcached's MFLAG_MAX_OPT_LENGTH and
// MFLAG_MAX_OPAQUE_LENGTH.
const (
	MetaMaxTokens    = 20
	MetaMaxOpaqueLen = 32
)

// Meta flag parse errors, worded as memcached 1.6.18 words them.
const (
	ErrMetaDuplicate  = "CLIENT_ERROR duplicate flag"
	ErrMetaInvalid    = "CLIENT_ERROR invalid flag"
	ErrMetaBadToken   = "CLIENT_ERROR bad token in command line format"
	ErrMetaDecodeKey  = "CLIENT_ERROR error decoding key"
	ErrMetaModeLength = "CLIENT_ERROR incorrect length for M token"
	ErrMetaInitial    = "CLIENT_ERROR invalid numeric initial value"
	ErrMetaDelta      = "CLIENT_ERROR invalid numeric delta value"
	ErrBadFormat      = "CLIENT_ERROR bad command line format"
)

// MetaFlags is the result of pre-parsing a meta command's flag tokens
// (memcached's _meta_flag_preparse). Times are the raw protocol values; the
// caller converts them with the store's clock.
type MetaFlags struct {
	HasError    bool  // a flag's value was bad; Err says which error (if set)
	NoUpdate    bool  // u
	Locked      bool  // memcached takes the item lock (N T R l h)
	Vivify      bool  // N
	LA          bool  // l
	Value       bool  // v
	SetStale    bool  // I
	NoReply     bool  // q
	HasCAS      bool  // C
	NewTTL      bool  // T
	KeyBinary   bool  // b
	Mode        byte  // M<mode>
	Exptime     int32 // T
	VivifyTTL   int32 // N
	Recache     int32 // R
	HasRecache  bool
	ClientFlags uint32 // F
	CAS         uint64 // C
	Delta       uint64 // D (default 1 for ma, set by the caller)
	Initial     uint64 // J
	Err         string // the error memcached would report, "" when none
}

// ParseMetaFlags pre-parses tokens t[start:n-1] (n counts memcached's
// terminal token). The key token t[1] is base64-decoded into keyBuf when the
// b flag is present, and the decoded key is returned. It reports false when
// memcached's preparse fails; f.Err then holds the error to send (which
// may be "" when memcached leaves the caller's default in place, as for a
// bad F value).
func ParseMetaFlags(t *Tokens, start int, f *MetaFlags, keyBuf []byte) (key []byte, ok bool) {
	key = t.T[1]
	var seen [128]bool
	for i := start; i < t.N-1; i++ {
		tok := t.T[i]
		o := tok[0]
		if o >= 127 || seen[o] {
			f.Err = ErrMetaDuplicate
			return key, false
		}
		seen[o] = true
		switch o {
		case 'b':
			n, good := Base64Decode(keyBuf[:0], t.T[1])
			if !good {
				f.Err = ErrMetaDecodeKey
				f.HasError = true
				key = key[:0]
			} else {
				key = n
			}
			f.KeyBinary = true
		case 'N':
			f.Locked = true
			f.Vivify = true
			if v, good := ParseInt32(tok[1:]); !good {
				f.Err = ErrMetaBadToken
				f.HasError = true
			} else {
				f.VivifyTTL = v
			}
		case 'T':
			f.Locked = true
			if v, good := ParseInt32(tok[1:]); !good {
				f.Err = ErrMetaBadToken
				f.HasError = true
			} else {
				f.Exptime = v
				f.NewTTL = true
			}
		case 'R':
			f.Locked = true
			if v, good := ParseInt32(tok[1:]); !good {
				f.Err = ErrMetaBadToken
				f.HasError = true
			} else {
				f.Recache = v
				f.HasRecache = true
			}
		case 'l':
			f.LA = true
			f.Locked = true
		case 'O', 'P', 'L', 'k', 's', 't', 'c', 'f':
		case 'v':
			f.Value = true
		case 'h':
			f.Locked = true
		case 'u':
			f.NoUpdate = true
		case 'q':
			f.NoReply = true
		case 'F':
			if v, good := ParseUint32(tok[1:]); !good {
				f.HasError = true
			} else {
				f.ClientFlags = v
			}
		case 'C':
			if v, good := ParseUint64(tok[1:]); !good {
				f.Err = ErrMetaBadToken
				f.HasError = true
			} else {
				f.CAS = v
				f.HasCAS = true
			}
		case 'M':
			if len(tok) != 2 {
				f.Err = ErrMetaModeLength
				f.HasError = true
			} else {
				f.Mode = tok[1]
			}
		case 'J':
			if v, good := ParseUint64(tok[1:]); !good {
				f.Err = ErrMetaInitial
				f.HasError = true
			} else {
				f.Initial = v
			}
		case 'D':
			if v, good := ParseUint64(tok[1:]); !good {
				f.Err = ErrMetaDelta
				f.HasError = true
			} else {
				f.Delta = v
			}
		case 'I':
			f.SetStale = true
		default:
			f.Err = ErrMetaInvalid
			return key, false
		}
	}
	return key, !f.HasError
}

const b64Table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// b64Decode maps a byte to its 6-bit value, '=' to 0, and anything else to
// 0x80 (skipped), as memcached's decoder does.
var b64Decode = func() (t [256]byte) {
	for i := range t {
		t[i] = 0x80
	}
	for i := 0; i < len(b64Table); i++ {
		t[b64Table[i]] = byte(i)
	}
	t['='] = 0
	return t
}()

// Base64Decode decodes src as memcached's base64_decode does: bytes outside
// the alphabet are skipped, the number of alphabet bytes must be a positive
// multiple of four, and decoding stops after the first padded block. It
// appends to dst and reports false where memcached returns 0.
func Base64Decode(dst, src []byte) ([]byte, bool) {
	count := 0
	for _, c := range src {
		if b64Decode[c] != 0x80 {
			count++
		}
	}
	if count == 0 || count%4 != 0 {
		return dst, false
	}
	start := len(dst)
	var block [4]byte
	n, pad := 0, 0
loop:
	for _, c := range src {
		v := b64Decode[c]
		if v == 0x80 {
			continue
		}
		if c == '=' {
			pad++
		}
		block[n] = v
		n++
		if n == 4 {
			dst = append(dst, block[0]<<2|block[1]>>4, block[1]<<4|block[2]>>2, block[2]<<6|block[3])
			n = 0
			if pad > 0 {
				switch pad {
				case 1:
					dst = dst[:len(dst)-1]
				case 2:
					dst = dst[:len(dst)-2]
				default:
					return dst[:start], false
				}
				break loop
			}
		}
	}
	if len(dst) == start {
		return dst, false
	}
	return dst, true
}

// Base64Encode appends the standard padded base64 encoding of src.
func Base64Encode(dst, src []byte) []byte {
	i := 0
	for ; len(src)-i >= 3; i += 3 {
		dst = append(dst, b64Table[src[i]>>2], b64Table[(src[i]&3)<<4|src[i+1]>>4],
			b64Table[(src[i+1]&0xf)<<2|src[i+2]>>6], b64Table[src[i+2]&0x3f])
	}
	switch len(src) - i {
	case 1:
		dst = append(dst, b64Table[src[i]>>2], b64Table[(src[i]&3)<<4], '=', '=')
	case 2:
		dst = append(dst, b64Table[src[i]>>2], b64Table[(src[i]&3)<<4|src[i+1]>>4],
			b64Table[(src[i+1]&0xf)<<2], '=')
	}
	return dst
}
