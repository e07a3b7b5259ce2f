package sasl

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
)

// Errors returned by Step and NewServer. Each is wrapped with detail, so
// test with errors.Is. Any of them means "answer AUTH_ERROR (0x20)"; the
// split is for logs and tests, and none of them should be sent to the client
// verbatim beyond a generic message.
var (
	// ErrAuthFailed means the credentials were wrong: unknown user, wrong
	// password or proof, a nonce or channel-binding field that does not
	// match the exchange, or an authorization identity we will not grant.
	// Unknown users and wrong passwords are deliberately indistinguishable.
	ErrAuthFailed = errors.New("sasl: authentication failed")

	// ErrMalformed means a client message did not parse: a missing or
	// misplaced attribute, bad base64, a bad saslname escape, a NUL byte,
	// an empty message where one is required, or a message longer than
	// MaxMessageLen.
	ErrMalformed = errors.New("sasl: malformed message")

	// ErrUnknownMechanism is returned by NewServer for a mechanism name
	// that is not one of the names listed in the package comment.
	ErrUnknownMechanism = errors.New("sasl: unknown mechanism")

	// ErrSequence means Step was called on a Server that has already
	// succeeded or failed. The client sent SASL_STEP without a live
	// exchange; start over with SASL_AUTH.
	ErrSequence = errors.New("sasl: step out of sequence")
)

// MaxMessageLen is the longest client message Step accepts. Cyrus's SCRAM
// plugin uses 2048; real messages are well under 512 bytes.
const MaxMessageLen = 4096

// DefaultIterations is the SCRAM iteration count used when
// Config.Iterations is zero: the minimum RFC 7677 asks for, and what Cyrus
// sends.
const DefaultIterations = 4096

// maxCachedKeys bounds the SCRAM key cache. Only users found by Lookup are
// cached, so this is only reached with a very large credential set.
const maxCachedKeys = 4096

// mechList is what Mechanisms returns; see the package comment for the order.
const mechList = "SCRAM-SHA512 SCRAM-SHA256 SCRAM-SHA1 SCRAM-SHA-512 SCRAM-SHA-256 SCRAM-SHA-1 PLAIN"

// Mechanisms returns the space-separated mechanism list for the body of a
// SASL_LIST_MECHS response. Every name in it is accepted by NewServer.
func Mechanisms() string { return mechList }

// hashSpec is one SCRAM hash function.
type hashSpec struct {
	name string // as in the IANA mechanism name, e.g. "SHA-256"
	new  func() hash.Hash
	size int
}

var (
	hashSHA1   = &hashSpec{"SHA-1", sha1.New, sha1.Size}
	hashSHA256 = &hashSpec{"SHA-256", sha256.New, sha256.Size}
	hashSHA512 = &hashSpec{"SHA-512", sha512.New, sha512.Size}
)

// lookupMech maps a mechanism name to its hash; PLAIN maps to nil.
func lookupMech(name string) (h *hashSpec, ok bool) {
	switch name {
	case "PLAIN":
		return nil, true
	case "SCRAM-SHA1", "SCRAM-SHA-1":
		return hashSHA1, true
	case "SCRAM-SHA256", "SCRAM-SHA-256":
		return hashSHA256, true
	case "SCRAM-SHA512", "SCRAM-SHA-512":
		return hashSHA512, true
	}
	return nil, false
}

// Config configures an Authenticator. The zero value of each field except
// Lookup means "use the default".
type Config struct {
	// Lookup returns the plaintext password of user, or ok=false if there
	// is no such user. It is called once per exchange, from whichever
	// goroutine calls Step, so it must be safe for concurrent use.
	// Passwords.Lookup of a file loaded by LoadPasswordFile or LoadAuthFile
	// and never written again qualifies. Required.
	Lookup func(user string) (password string, ok bool)

	// Previous, when not nil, returns a second password that also logs
	// user in, or ok=false if there is none: the old one while a rotation
	// is under way, so that processes still holding it and processes
	// already given the new one both log in until every one has the new
	// one. The same concurrency rules as Lookup's apply. A user Lookup
	// does not know has no previous password.
	Previous func(user string) (password string, ok bool)

	// Iterations is the SCRAM iteration count (the i= attribute). Zero
	// means DefaultIterations. Each first login of a user costs this many
	// HMAC rounds on the server; later logins hit the cache.
	Iterations int

	// Rand supplies server nonces and the per-process salt key. Nil means
	// crypto/rand.Reader. It must be safe for concurrent use.
	Rand io.Reader
}

func (c *Config) validate() error {
	if c.Lookup == nil {
		return errors.New("sasl: Config.Lookup is nil")
	}
	if c.Iterations < 0 {
		return fmt.Errorf("sasl: Config.Iterations is negative (%d)", c.Iterations)
	}
	return nil
}

// An Authenticator holds what SASL exchanges share across connections: the
// credential lookup, the salt key and the SCRAM key cache. It is safe for
// concurrent use.
type Authenticator struct {
	lookup     func(string) (string, bool)
	previous   func(string) (string, bool) // nil: no rotation support
	iterations int
	rand       io.Reader
	saltKey    []byte // 32 random bytes; never changes

	mu   sync.Mutex        // protects keys
	keys map[keyID]keyPair // SCRAM keys of known users

	// Test hooks; nil in production.
	nonceHook func() string            // the server half of the nonce
	saltHook  func(user string) []byte // the salt
}

type keyID struct {
	h    *hashSpec
	user string
	prev bool // the keys of Config.Previous's password
}

// keyPair is what SCRAM needs from a password: StoredKey and ServerKey.
// salt and fp record what they were derived from, so a changed password (or,
// in tests, salt) is noticed.
type keyPair struct {
	stored, server []byte
	salt           []byte
	fp             [sha256.Size]byte
}

// NewAuthenticator validates cfg and returns an Authenticator. It reads 32
// bytes from cfg.Rand for the salt key.
func NewAuthenticator(cfg Config) (*Authenticator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Authenticator{
		lookup:     cfg.Lookup,
		previous:   cfg.Previous,
		iterations: cfg.Iterations,
		rand:       cfg.Rand,
		saltKey:    make([]byte, 32),
		keys:       make(map[keyID]keyPair),
	}
	if a.iterations == 0 {
		a.iterations = DefaultIterations
	}
	if a.rand == nil {
		a.rand = rand.Reader
	}
	if _, err := io.ReadFull(a.rand, a.saltKey); err != nil {
		return nil, fmt.Errorf("sasl: read salt key: %w", err)
	}
	return a, nil
}

// previousOf returns user's previous password (Config.Previous), if
// Lookup knows user (known) and there is one.
func (a *Authenticator) previousOf(user string, known bool) (string, bool) {
	if !known || a.previous == nil {
		return "", false
	}
	p, ok := a.previous(user)
	return p, ok && p != ""
}

// NewServer starts one exchange for mech, the key of a SASL_AUTH request.
// It returns an error wrapping ErrUnknownMechanism if mech is not a name
// from the package comment.
func (a *Authenticator) NewServer(mech string) (*Server, error) {
	h, ok := lookupMech(mech)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownMechanism, mech)
	}
	return &Server{a: a, mech: mech, h: h}, nil
}

// state is where a Server is in its exchange. All mechanisms start in
// stateStart; PLAIN goes straight to stateDone or stateFailed.
type state uint8

const (
	// stateStart: nothing received yet. An empty message here is an
	// absent initial response; we answer with an empty challenge.
	stateStart state = iota
	// stateInitial: we sent the empty challenge and wait for the first
	// real message (PLAIN credentials or SCRAM client-first).
	stateInitial
	// stateFinal: SCRAM only; server-first sent, waiting for client-final.
	stateFinal
	// stateDone: authenticated; User is set. Further Steps fail.
	stateDone
	// stateFailed: a Step returned an error. Further Steps fail.
	stateFailed
)

func (s state) String() string {
	switch s {
	case stateStart:
		return "start"
	case stateInitial:
		return "initial"
	case stateFinal:
		return "final"
	case stateDone:
		return "done"
	case stateFailed:
		return "failed"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// A Server is one SASL exchange on one connection. It is not safe for
// concurrent use. See the package comment for how Step's results map to
// binary protocol statuses.
type Server struct {
	a    *Authenticator
	mech string
	h    *hashSpec // nil for PLAIN
	st   state

	user     string // the authentication identity once parsed
	authUser string // set only on success

	// SCRAM, between client-first and client-final.
	known   bool   // Lookup found user
	gs2     string // gs2 header of client-first, for the c= check
	nonce   string // client nonce + server nonce
	authMsg string // client-first-bare "," server-first
	keys    keyPair
	prev    keyPair // of Config.Previous's password; zero without one
}

// Mechanism returns the mechanism name as the client spelled it.
func (s *Server) Mechanism() string { return s.mech }

// User returns the authenticated user name, or "" until Step has returned
// done=true.
func (s *Server) User() string { return s.authUser }

// Step consumes one client message (the value of SASL_AUTH, then of each
// SASL_STEP) and returns the server's answer:
//
//   - out, done=false, err=nil: send out with AUTH_CONTINUE and expect a
//     SASL_STEP;
//   - out, done=true, err=nil: authenticated; send out with SUCCESS;
//   - err != nil: send AUTH_ERROR; this Server is finished and every later
//     Step returns ErrSequence.
//
// in is not retained; out is freshly allocated and owned by the caller.
func (s *Server) Step(in []byte) (out []byte, done bool, err error) {
	switch s.st {
	case stateDone, stateFailed:
		// Not s.fail: a late step must not turn a success into a failure.
		return nil, false, fmt.Errorf("%w: step after %v", ErrSequence, s.st)
	}
	if len(in) > MaxMessageLen {
		return s.fail(fmt.Errorf("%w: message of %d bytes exceeds %d", ErrMalformed, len(in), MaxMessageLen))
	}
	switch s.st {
	case stateStart:
		if len(in) == 0 {
			s.st = stateInitial
			return []byte{}, false, nil
		}
		return s.first(in)
	case stateInitial:
		if len(in) == 0 {
			return s.fail(fmt.Errorf("%w: empty message", ErrMalformed))
		}
		return s.first(in)
	case stateFinal:
		return s.scramFinal(in)
	}
	panic(fmt.Sprintf("sasl: Step in impossible state %v", s.st))
}

func (s *Server) first(in []byte) ([]byte, bool, error) {
	if s.h == nil {
		return s.plain(in)
	}
	return s.scramFirst(in)
}

// fail moves to stateFailed, drops secrets and returns err for Step.
func (s *Server) fail(err error) ([]byte, bool, error) {
	s.st = stateFailed
	s.keys, s.prev = keyPair{}, keyPair{}
	s.authMsg = ""
	return nil, false, err
}

// succeed moves to stateDone and returns out for Step.
func (s *Server) succeed(out []byte) ([]byte, bool, error) {
	s.st = stateDone
	s.authUser = s.user
	s.keys, s.prev = keyPair{}, keyPair{}
	s.authMsg = ""
	return out, true, nil
}

// plain handles the single PLAIN message (RFC 4616 section 2):
//
//	message = [authzid] UTF8NUL authcid UTF8NUL passwd
//
// authcid and passwd must be non-empty; authzid must be empty or equal to
// authcid.
func (s *Server) plain(in []byte) ([]byte, bool, error) {
	authz, rest, ok := bytes.Cut(in, []byte{0})
	if !ok {
		return s.fail(fmt.Errorf("%w: PLAIN message has no NUL separator", ErrMalformed))
	}
	authc, pass, ok := bytes.Cut(rest, []byte{0})
	if !ok {
		return s.fail(fmt.Errorf("%w: PLAIN message has one NUL separator, want two", ErrMalformed))
	}
	switch {
	case bytes.IndexByte(pass, 0) >= 0:
		return s.fail(fmt.Errorf("%w: PLAIN message has more than two NUL separators", ErrMalformed))
	case len(authc) == 0:
		return s.fail(fmt.Errorf("%w: PLAIN message has an empty user name", ErrMalformed))
	case len(pass) == 0:
		return s.fail(fmt.Errorf("%w: PLAIN message has an empty password", ErrMalformed))
	case len(authz) > 0 && !bytes.Equal(authz, authc):
		return s.fail(fmt.Errorf("%w: authorization identity differs from user name", ErrAuthFailed))
	}
	s.user = string(authc)
	want, known := s.a.lookup(s.user)
	// Compare digests so neither the length nor the content of the stored
	// password shows in the timing; unknown users compare against "".
	wd, gd := sha256.Sum256([]byte(want)), sha256.Sum256(pass)
	match := subtle.ConstantTimeCompare(wd[:], gd[:]) == 1
	if old, ok := s.a.previousOf(s.user, known); ok {
		od := sha256.Sum256([]byte(old))
		match = subtle.ConstantTimeCompare(od[:], gd[:]) == 1 || match
	}
	if !known || !match {
		return s.fail(fmt.Errorf("%w: PLAIN: bad user name or password", ErrAuthFailed))
	}
	return s.succeed(nil)
}
