package sasl

import (
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Client is the client side of one SCRAM exchange (RFC 5802 section 3,
// without channel binding), which vbcache's own processes use to log in to
// a node as the cluster administrator: the manager's control connections,
// a node's streams from its peers, ctl. The exchange is the two round trips
// the server answers (see the package comment):
//
//	SASL_AUTH  key=mech value=First()      -> AUTH_CONTINUE server-first
//	SASL_STEP  value=Final(server-first)   -> SUCCESS v=server-signature
//	Verify(v=...)
//
// A Client is used once, by one goroutine.
type Client struct {
	h              *hashSpec
	mech           string
	user, password string
	nonce          string
	bare, authMsg  string
	salted         []byte
}

// ClientMechanism is the mechanism vbcache's processes log in with.
const ClientMechanism = "SCRAM-SHA256"

// NewClient starts an exchange with mech, a SCRAM mechanism name that
// NewServer accepts (PLAIN is not offered: it would send the password in
// the clear on a link without TLS).
func NewClient(mech, user, password string) (*Client, error) {
	h, ok := lookupMech(mech)
	if !ok || h == nil {
		return nil, fmt.Errorf("sasl: %q is not a SCRAM mechanism", mech)
	}
	if user == "" || password == "" {
		return nil, errors.New("sasl: empty user or password")
	}
	var b [18]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return &Client{h: h, mech: mech, user: user, password: password, nonce: base64.RawURLEncoding.EncodeToString(b[:])}, nil
}

// Mechanism is the mechanism name for SASL_AUTH's key.
func (c *Client) Mechanism() string { return c.mech }

// First returns client-first, SASL_AUTH's value.
func (c *Client) First() []byte {
	c.bare = "n=" + strings.NewReplacer("=", "=3D", ",", "=2C").Replace(c.user) + ",r=" + c.nonce
	return []byte("n,," + c.bare)
}

// Final takes the server-first message and returns client-final, SASL_STEP's
// value.
func (c *Client) Final(serverFirst []byte) ([]byte, error) {
	if c.bare == "" {
		return nil, ErrSequence
	}
	attrs := strings.Split(string(serverFirst), ",")
	if len(attrs) < 3 || !strings.HasPrefix(attrs[0], "r=") || !strings.HasPrefix(attrs[1], "s=") || !strings.HasPrefix(attrs[2], "i=") {
		return nil, fmt.Errorf("sasl: bad server-first message %.64q", serverFirst)
	}
	nonce := attrs[0][2:]
	if !strings.HasPrefix(nonce, c.nonce) || len(nonce) == len(c.nonce) {
		return nil, errors.New("sasl: the server's nonce does not extend ours")
	}
	salt, err := base64.StdEncoding.DecodeString(attrs[1][2:])
	if err != nil || len(salt) == 0 {
		return nil, errors.New("sasl: bad salt in server-first")
	}
	iter, err := strconv.Atoi(attrs[2][2:])
	if err != nil || iter < 1 || iter > maxClientIterations {
		return nil, fmt.Errorf("sasl: iteration count %q out of range", attrs[2])
	}
	if c.salted, err = clientSalted(c.h, c.password, salt, iter); err != nil {
		return nil, err
	}
	withoutProof := "c=biws,r=" + nonce // biws: base64("n,,")
	c.authMsg = c.bare + "," + string(serverFirst) + "," + withoutProof
	clientKey := hmacSum(c.h, c.salted, []byte("Client Key"))
	hh := c.h.new()
	hh.Write(clientKey)
	proof := hmacSum(c.h, hh.Sum(nil), []byte(c.authMsg))
	subtle.XORBytes(proof, proof, clientKey)
	return []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)), nil
}

// Verify checks server-final (the SUCCESS body): a server that does not
// know the password cannot sign the exchange.
func (c *Client) Verify(serverFinal []byte) error {
	v, ok := bytes.CutPrefix(serverFinal, []byte("v="))
	if !ok || c.salted == nil {
		return fmt.Errorf("sasl: bad server-final message %.64q", serverFinal)
	}
	got, err := base64.StdEncoding.DecodeString(string(v))
	if err != nil {
		return fmt.Errorf("sasl: bad server signature: %v", err)
	}
	want := hmacSum(c.h, hmacSum(c.h, c.salted, []byte("Server Key")), []byte(c.authMsg))
	if !hmac.Equal(got, want) {
		return errors.New("sasl: the server's signature does not match: it does not know the password")
	}
	return nil
}

// maxClientIterations bounds the work a server can make a client do.
const maxClientIterations = 1 << 20

// clientSalted is PBKDF2, remembered for the last few (hash, password, salt,
// iterations): a node's salt for a user is stable for the life of its
// process, so reconnecting streams and control connections pay the
// iterations once per node.
func clientSalted(h *hashSpec, password string, salt []byte, iter int) ([]byte, error) {
	key := h.name + "\x00" + password + "\x00" + string(salt) + "\x00" + strconv.Itoa(iter)
	saltedCache.mu.Lock()
	v, ok := saltedCache.m[key]
	saltedCache.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := pbkdf2.Key(h.new, password, salt, iter, h.size)
	if err != nil {
		return nil, err
	}
	saltedCache.mu.Lock()
	if len(saltedCache.m) >= maxSaltedCache {
		clear(saltedCache.m)
	}
	saltedCache.m[key] = v
	saltedCache.mu.Unlock()
	return v, nil
}

const maxSaltedCache = 256

// saltedCache.mu protects saltedCache.m.
var saltedCache = struct {
	mu sync.Mutex
	m  map[string][]byte
}{m: map[string][]byte{}}
