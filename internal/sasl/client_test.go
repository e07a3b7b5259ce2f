package sasl

import (
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// scramClient is the client side of SCRAM, written from RFC 5802 section 3
// for the tests. It shares no code with the server except hashSpec.
type scramClient struct {
	h        *hashSpec
	user     string
	password string
	cnonce   string
	gs2      string // "n,," unless a test sets it

	bare    string
	authMsg string
	salted  []byte
}

func newClient(h *hashSpec, user, password, cnonce string) *scramClient {
	return &scramClient{h: h, user: user, password: password, cnonce: cnonce, gs2: "n,,"}
}

func escapeSaslname(s string) string {
	return strings.NewReplacer("=", "=3D", ",", "=2C").Replace(s)
}

// first returns client-first.
func (c *scramClient) first() []byte {
	c.bare = "n=" + escapeSaslname(c.user) + ",r=" + c.cnonce
	return []byte(c.gs2 + c.bare)
}

// final parses server-first and returns client-final.
func (c *scramClient) final(serverFirst []byte) ([]byte, error) {
	attrs := strings.Split(string(serverFirst), ",")
	if len(attrs) < 3 || !strings.HasPrefix(attrs[0], "r=") ||
		!strings.HasPrefix(attrs[1], "s=") || !strings.HasPrefix(attrs[2], "i=") {
		return nil, fmt.Errorf("client: bad server-first %q", serverFirst)
	}
	nonce := attrs[0][2:]
	if !strings.HasPrefix(nonce, c.cnonce) || len(nonce) == len(c.cnonce) {
		return nil, fmt.Errorf("client: server nonce %q does not extend ours", nonce)
	}
	salt, err := base64.StdEncoding.DecodeString(attrs[1][2:])
	if err != nil {
		return nil, fmt.Errorf("client: salt: %v", err)
	}
	iter, err := strconv.Atoi(attrs[2][2:])
	if err != nil || iter < 1 {
		return nil, fmt.Errorf("client: bad iteration count %q", attrs[2])
	}
	c.salted, err = saltedPassword(c.h, c.password, salt, iter)
	if err != nil {
		return nil, err
	}
	withoutProof := "c=" + base64.StdEncoding.EncodeToString([]byte(c.gs2)) + ",r=" + nonce
	c.authMsg = c.bare + "," + string(serverFirst) + "," + withoutProof
	proof := clientProof(c.h, c.salted, c.authMsg)
	return []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)), nil
}

// verify checks server-final.
func (c *scramClient) verify(serverFinal []byte) error {
	v, ok := bytes.CutPrefix(serverFinal, []byte("v="))
	if !ok {
		return fmt.Errorf("client: bad server-final %q", serverFinal)
	}
	got, err := base64.StdEncoding.DecodeString(string(v))
	if err != nil {
		return err
	}
	serverKey := testHMAC(c.h, c.salted, "Server Key")
	if !hmac.Equal(got, testHMAC(c.h, serverKey, c.authMsg)) {
		return errors.New("client: server signature mismatch")
	}
	return nil
}

// saltedPassword is PBKDF2 with a memo, so the tests stay fast under -race.
func saltedPassword(h *hashSpec, password string, salt []byte, iter int) ([]byte, error) {
	key := fmt.Sprint(h.name, "\x00", password, "\x00", string(salt), "\x00", iter)
	saltedMu.Lock()
	v, ok := saltedMemo[key]
	saltedMu.Unlock()
	if ok {
		return v, nil
	}
	v, err := pbkdf2.Key(h.new, password, salt, iter, h.size)
	if err != nil {
		return nil, err
	}
	saltedMu.Lock()
	saltedMemo[key] = v
	saltedMu.Unlock()
	return v, nil
}

var (
	saltedMu   sync.Mutex
	saltedMemo = map[string][]byte{}
)

func testHMAC(h *hashSpec, key []byte, msg string) []byte {
	m := hmac.New(h.new, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// clientProof computes ClientProof from SaltedPassword and AuthMessage.
func clientProof(h *hashSpec, salted []byte, authMsg string) []byte {
	clientKey := testHMAC(h, salted, "Client Key")
	hh := h.new()
	hh.Write(clientKey)
	sig := testHMAC(h, hh.Sum(nil), authMsg)
	subtle.XORBytes(sig, sig, clientKey)
	return sig
}

// exchange runs a whole SCRAM exchange and returns the server's error, if
// any, after checking the server-final on success.
func exchange(a *Authenticator, mech string, c *scramClient) (*Server, error) {
	s, err := a.NewServer(mech)
	if err != nil {
		return nil, err
	}
	out, done, err := s.Step(c.first())
	if err != nil {
		return s, err
	}
	if done {
		return s, errors.New("done after client-first")
	}
	final, err := c.final(out)
	if err != nil {
		return s, err
	}
	out, done, err = s.Step(final)
	if err != nil {
		return s, err
	}
	if !done {
		return s, errors.New("not done after client-final")
	}
	return s, c.verify(out)
}
