package sasl

import (
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// SCRAM messages (RFC 5802 section 7), as the server sees them:
//
//	client-first  = gs2-header client-first-bare
//	gs2-header    = ("n" / "y" / "p=" cb-name) "," ["a=" saslname] ","
//	client-first-bare = ["m=" ext ","] "n=" saslname "," "r=" c-nonce ["," ext...]
//	server-first  = "r=" c-nonce s-nonce "," "s=" base64(salt) "," "i=" count
//	client-final  = "c=" base64(gs2-header) "," "r=" nonce ["," ext...] "," "p=" base64(ClientProof)
//	server-final  = "v=" base64(ServerSignature)
//
//	SaltedPassword  = PBKDF2-HMAC-H(password, salt, count)
//	ClientKey       = HMAC(SaltedPassword, "Client Key")
//	StoredKey       = H(ClientKey)
//	ServerKey       = HMAC(SaltedPassword, "Server Key")
//	AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
//	ClientSignature = HMAC(StoredKey, AuthMessage)
//	ClientProof     = ClientKey XOR ClientSignature
//	ServerSignature = HMAC(ServerKey, AuthMessage)
//
// The server checks H(ClientProof XOR ClientSignature) == StoredKey.

var b64 = base64.StdEncoding.Strict()

// decodeB64 is RFC 5802's base64: Strict still skips CR and LF, which the
// RFC's grammar does not allow inside a value.
func decodeB64(v string) ([]byte, error) {
	if strings.ContainsAny(v, "\r\n") {
		return nil, base64.CorruptInputError(strings.IndexAny(v, "\r\n"))
	}
	return b64.DecodeString(v)
}

// serverNonceLen is the number of random bytes in the server's half of the
// nonce; base64 makes it 24 printable characters without padding.
const serverNonceLen = 18

// saltLen is the length of the per-user salt in bytes.
const saltLen = 16

// scramFirst handles client-first and returns server-first.
func (s *Server) scramFirst(in []byte) ([]byte, bool, error) {
	if bytes.IndexByte(in, 0) >= 0 {
		return s.fail(fmt.Errorf("%w: NUL byte in client-first", ErrMalformed))
	}
	msg := string(in)

	// gs2-header.
	var rest string
	switch {
	case strings.HasPrefix(msg, "n,"), strings.HasPrefix(msg, "y,"):
		// "y": the client could bind but thinks we cannot. We advertise
		// no -PLUS mechanism, so that is true and there is no downgrade.
		rest = msg[2:]
	case strings.HasPrefix(msg, "p="):
		return s.fail(fmt.Errorf("%w: channel binding is not supported", ErrAuthFailed))
	default:
		return s.fail(fmt.Errorf("%w: client-first must start with \"n,\" or \"y,\"", ErrMalformed))
	}
	authzEnc, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return s.fail(fmt.Errorf("%w: gs2 header is not terminated", ErrMalformed))
	}
	var authz string
	if authzEnc != "" {
		enc, ok := strings.CutPrefix(authzEnc, "a=")
		if !ok {
			return s.fail(fmt.Errorf("%w: bad authzid in gs2 header", ErrMalformed))
		}
		var err error
		if authz, err = decodeSaslname(enc); err != nil {
			return s.fail(fmt.Errorf("%w: authzid: %v", ErrMalformed, err))
		}
	}
	gs2 := msg[:len(msg)-len(bare)]

	// client-first-bare.
	fields := strings.Split(bare, ",")
	if strings.HasPrefix(fields[0], "m=") {
		return s.fail(fmt.Errorf("%w: mandatory extension is not supported", ErrMalformed))
	}
	if len(fields) < 2 {
		return s.fail(fmt.Errorf("%w: client-first needs n= and r=", ErrMalformed))
	}
	userEnc, ok := strings.CutPrefix(fields[0], "n=")
	if !ok {
		return s.fail(fmt.Errorf("%w: client-first-bare must start with n=", ErrMalformed))
	}
	user, err := decodeSaslname(userEnc)
	if err != nil {
		return s.fail(fmt.Errorf("%w: user name: %v", ErrMalformed, err))
	}
	cnonce, ok := strings.CutPrefix(fields[1], "r=")
	if !ok {
		return s.fail(fmt.Errorf("%w: r= must follow n= in client-first", ErrMalformed))
	}
	if !validNonce(cnonce) {
		return s.fail(fmt.Errorf("%w: client nonce is empty or not printable", ErrMalformed))
	}
	for _, f := range fields[2:] {
		if !validAttr(f) {
			return s.fail(fmt.Errorf("%w: bad extension attribute in client-first", ErrMalformed))
		}
	}
	if authz != "" && authz != user {
		return s.fail(fmt.Errorf("%w: authorization identity differs from user name", ErrAuthFailed))
	}

	s.user = user
	salt := s.a.salt(s.h, user)
	password, known := s.a.lookup(user)
	if known {
		if s.keys, err = s.a.keysFor(s.h, keyID{s.h, user, false}, password, salt); err != nil {
			return s.fail(err)
		}
		if old, ok := s.a.previousOf(user, known); ok {
			// Both passwords share the salt, so one server-first
			// serves both; the proof says which one the client has.
			if s.prev, err = s.a.keysFor(s.h, keyID{s.h, user, true}, old, salt); err != nil {
				return s.fail(err)
			}
		}
	} else {
		// Unknown user: keys nobody can produce a proof for; the
		// exchange goes on and fails at the proof like a wrong password.
		s.keys = s.a.fakeKeys(s.h, user)
	}
	s.known = known
	snonce, err := s.a.serverNonce()
	if err != nil {
		return s.fail(err)
	}
	s.nonce = cnonce + snonce
	s.gs2 = gs2
	serverFirst := "r=" + s.nonce + ",s=" + b64.EncodeToString(salt) + ",i=" + strconv.Itoa(s.a.iterations)
	s.authMsg = bare + "," + serverFirst
	s.st = stateFinal
	return []byte(serverFirst), false, nil
}

// scramFinal handles client-final and returns server-final.
func (s *Server) scramFinal(in []byte) ([]byte, bool, error) {
	if bytes.IndexByte(in, 0) >= 0 {
		return s.fail(fmt.Errorf("%w: NUL byte in client-final", ErrMalformed))
	}
	msg := string(in)
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return s.fail(fmt.Errorf("%w: client-final has no proof (p=)", ErrMalformed))
	}
	withoutProof, proofEnc := msg[:i], msg[i+len(",p="):]
	fields := strings.Split(withoutProof, ",")
	if len(fields) < 2 {
		return s.fail(fmt.Errorf("%w: client-final needs c=, r= and p=", ErrMalformed))
	}
	cbEnc, ok := strings.CutPrefix(fields[0], "c=")
	if !ok {
		return s.fail(fmt.Errorf("%w: client-final must start with c=", ErrMalformed))
	}
	nonce, ok := strings.CutPrefix(fields[1], "r=")
	if !ok {
		return s.fail(fmt.Errorf("%w: r= must follow c= in client-final", ErrMalformed))
	}
	for _, f := range fields[2:] {
		if !validAttr(f) {
			return s.fail(fmt.Errorf("%w: bad extension attribute in client-final", ErrMalformed))
		}
	}
	cb, err := decodeB64(cbEnc)
	if err != nil {
		return s.fail(fmt.Errorf("%w: c= is not base64", ErrMalformed))
	}
	proof, err := decodeB64(proofEnc)
	if err != nil {
		return s.fail(fmt.Errorf("%w: p= is not base64", ErrMalformed))
	}
	if len(proof) != s.h.size {
		return s.fail(fmt.Errorf("%w: proof is %d bytes, want %d", ErrMalformed, len(proof), s.h.size))
	}
	if string(cb) != s.gs2 {
		return s.fail(fmt.Errorf("%w: channel binding (c=) does not match the gs2 header", ErrAuthFailed))
	}
	if nonce != s.nonce {
		return s.fail(fmt.Errorf("%w: nonce does not match", ErrAuthFailed))
	}

	authMsg := []byte(s.authMsg + "," + withoutProof)
	k := s.keys
	valid := s.proves(k, proof, authMsg)
	if s.prev.stored != nil && !valid {
		k = s.prev
		valid = s.proves(k, proof, authMsg)
	}
	if !valid || !s.known {
		return s.fail(fmt.Errorf("%w: invalid proof", ErrAuthFailed))
	}
	serverSig := hmacSum(s.h, k.server, authMsg)
	return s.succeed([]byte("v=" + b64.EncodeToString(serverSig)))
}

// proves reports whether proof is the client proof of the password k was
// derived from: H(ClientSignature XOR proof) must be StoredKey.
func (s *Server) proves(k keyPair, proof, authMsg []byte) bool {
	clientKey := hmacSum(s.h, k.stored, authMsg) // ClientSignature for now
	subtle.XORBytes(clientKey, clientKey, proof)
	hh := s.h.new()
	hh.Write(clientKey)
	return subtle.ConstantTimeCompare(hh.Sum(nil), k.stored) == 1
}

// decodeSaslname undoes SCRAM's saslname escaping ("=2C" is ',', "=3D" is
// '='). The result must be non-empty, valid UTF-8 and contain no NUL; the
// input cannot contain ',' because the caller split on it.
func decodeSaslname(enc string) (string, error) {
	if enc == "" {
		return "", fmt.Errorf("empty")
	}
	if !utf8.ValidString(enc) {
		return "", fmt.Errorf("not UTF-8")
	}
	if strings.IndexByte(enc, '=') < 0 {
		return enc, nil
	}
	var b strings.Builder
	b.Grow(len(enc))
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if c != '=' {
			b.WriteByte(c)
			continue
		}
		switch {
		case strings.HasPrefix(enc[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(enc[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", fmt.Errorf("bad escape at byte %d", i)
		}
		i += 2
	}
	return b.String(), nil
}

// validNonce reports whether n is a non-empty run of RFC 5802 "printable"
// characters (0x21-0x7E except ',').
func validNonce(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; c < 0x21 || c > 0x7e || c == ',' {
			return false
		}
	}
	return true
}

// validAttr reports whether f has the form of an extension attr-val: one
// ASCII letter, '=', anything.
func validAttr(f string) bool {
	if len(f) < 2 || f[1] != '=' {
		return false
	}
	c := f[0] | 0x20
	return c >= 'a' && c <= 'z'
}

func hmacSum(h *hashSpec, key, msg []byte) []byte {
	m := hmac.New(h.new, key)
	m.Write(msg)
	return m.Sum(nil)
}

// salt returns user's salt for hash h: stable for the life of a, secret
// without a's salt key, and computed the same way for unknown users.
func (a *Authenticator) salt(h *hashSpec, user string) []byte {
	if a.saltHook != nil {
		return a.saltHook(user)
	}
	return a.mac("salt", h.name, user)[:saltLen]
}

// mac is HMAC-SHA-256 under the salt key over NUL-joined parts.
func (a *Authenticator) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, a.saltKey)
	for i, p := range parts {
		if i > 0 {
			m.Write([]byte{0})
		}
		io.WriteString(m, p)
	}
	return m.Sum(nil)
}

// fakeKeys stands in for the keys of an unknown user. StoredKey is secret
// and random-looking, so no proof matches it short of a hash preimage; the
// proof check also looks at Server.known.
func (a *Authenticator) fakeKeys(h *hashSpec, user string) keyPair {
	stored := hmacSum(h, a.saltKey, []byte("fake stored key\x00"+h.name+"\x00"+user))
	return keyPair{stored: stored, server: stored}
}

// serverNonce returns the server's half of the nonce.
func (a *Authenticator) serverNonce() (string, error) {
	if a.nonceHook != nil {
		return a.nonceHook(), nil
	}
	var buf [serverNonceLen]byte
	if _, err := io.ReadFull(a.rand, buf[:]); err != nil {
		return "", fmt.Errorf("sasl: read server nonce: %w", err)
	}
	return b64.EncodeToString(buf[:]), nil
}

// keysFor returns StoredKey and ServerKey for a known user, from the cache
// when the password and salt are unchanged, else by running PBKDF2 (outside
// the lock; two connections may race to fill the same entry, which is
// harmless).
func (a *Authenticator) keysFor(h *hashSpec, id keyID, password string, salt []byte) (keyPair, error) {
	fp := [sha256.Size]byte(a.mac("password", password))
	a.mu.Lock()
	k, ok := a.keys[id]
	a.mu.Unlock()
	if ok && k.fp == fp && bytes.Equal(k.salt, salt) {
		return k, nil
	}
	salted, err := pbkdf2.Key(h.new, password, salt, a.iterations, h.size)
	if err != nil {
		return keyPair{}, fmt.Errorf("sasl: derive SCRAM keys: %w", err)
	}
	clientKey := hmacSum(h, salted, []byte("Client Key"))
	hh := h.new()
	hh.Write(clientKey)
	k = keyPair{
		stored: hh.Sum(nil),
		server: hmacSum(h, salted, []byte("Server Key")),
		salt:   bytes.Clone(salt),
		fp:     fp,
	}
	a.mu.Lock()
	if len(a.keys) >= maxCachedKeys {
		clear(a.keys)
	}
	a.keys[id] = k
	a.mu.Unlock()
	return k, nil
}
