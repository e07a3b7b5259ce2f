package security

import (
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// Binary protocol pieces this file needs.
const (
	opGet       = 0x00
	opSet       = 0x01
	opSASLList  = 0x20
	opSASLAuth  = 0x21
	opSASLStep  = 0x22
	stOK        = 0x0000
	stAuthError = 0x0020
	stAuthCont  = 0x0021
)

type binConn struct {
	t *testing.T
	c net.Conn
}

func dialBin(t *testing.T, addr string) *binConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &binConn{t: t, c: c}
}

// send writes one request: a 24-byte header (magic 0x80, opcode, key
// length, extras length, datatype 0, vbucket 0, body length, opaque 0,
// cas 0), then extras, key, value.
func (b *binConn) send(op byte, extras, key, value []byte) {
	b.t.Helper()
	h := make([]byte, 24)
	h[0], h[1] = 0x80, op
	binary.BigEndian.PutUint16(h[2:], uint16(len(key)))
	h[4] = byte(len(extras))
	binary.BigEndian.PutUint32(h[8:], uint32(len(extras)+len(key)+len(value)))
	msg := append(append(append(h, extras...), key...), value...)
	_ = b.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := b.c.Write(msg); err != nil {
		b.t.Fatalf("write: %v", err)
	}
}

// recv reads one response and returns its status and value (or ok=false
// on EOF or a timeout).
func (b *binConn) recv() (status uint16, value []byte, ok bool) {
	_ = b.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	h := make([]byte, 24)
	if _, err := io.ReadFull(b.c, h); err != nil {
		return 0, nil, false
	}
	if h[0] != 0x81 {
		b.t.Fatalf("response magic 0x%02x", h[0])
	}
	body := make([]byte, binary.BigEndian.Uint32(h[8:]))
	if _, err := io.ReadFull(b.c, body); err != nil {
		return 0, nil, false
	}
	return binary.BigEndian.Uint16(h[6:]), body[int(h[4])+int(binary.BigEndian.Uint16(h[2:])):], true
}

func (b *binConn) call(op byte, extras, key, value []byte) (uint16, []byte) {
	b.t.Helper()
	b.send(op, extras, key, value)
	st, v, ok := b.recv()
	if !ok {
		b.t.Fatalf("opcode 0x%02x: no reply (connection closed or timed out)", op)
	}
	return st, v
}

// scramClient is the client side of RFC 5802 SCRAM (no channel binding:
// GS2 header "n,,").
type scramClient struct {
	h              func() hash.Hash
	user, pass     string
	cnonce         string
	clientFirst    string // client-first-message-bare
	serverSig      []byte
	authMessageDbg string
}

func newScram(h func() hash.Hash, user, pass string) *scramClient {
	nb := make([]byte, 18)
	_, _ = rand.Read(nb)
	s := &scramClient{h: h, user: user, pass: pass, cnonce: base64.StdEncoding.EncodeToString(nb)}
	// RFC 5802 5.1: '=' and ',' in the user name are escaped as =3D, =2C.
	u := strings.NewReplacer("=", "=3D", ",", "=2C").Replace(user)
	s.clientFirst = "n=" + u + ",r=" + s.cnonce
	return s
}

func (s *scramClient) first() []byte { return []byte("n,," + s.clientFirst) }

// final answers the server-first-message with the client-final-message.
func (s *scramClient) final(serverFirst []byte) ([]byte, error) {
	attrs := map[string]string{}
	for _, kv := range strings.Split(string(serverFirst), ",") {
		if len(kv) < 2 || kv[1] != '=' {
			return nil, fmt.Errorf("bad server-first attribute %q", kv)
		}
		attrs[kv[:1]] = kv[2:]
	}
	nonce, saltB64, iterS := attrs["r"], attrs["s"], attrs["i"]
	if !strings.HasPrefix(nonce, s.cnonce) || len(nonce) <= len(s.cnonce) {
		return nil, fmt.Errorf("server nonce %q does not extend ours %q", nonce, s.cnonce)
	}
	salt, err := base64.StdEncoding.DecodeString(saltB64)
	if err != nil {
		return nil, fmt.Errorf("salt: %v", err)
	}
	iter, err := strconv.Atoi(iterS)
	if err != nil || iter < 1 {
		return nil, fmt.Errorf("iteration count %q", iterS)
	}
	salted, err := pbkdf2.Key(s.h, s.pass, salt, iter, s.h().Size())
	if err != nil {
		return nil, err
	}
	mac := func(key []byte, msg string) []byte {
		m := hmac.New(s.h, key)
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	hh := s.h()
	hh.Write(clientKey)
	storedKey := hh.Sum(nil)
	withoutProof := "c=" + base64.StdEncoding.EncodeToString([]byte("n,,")) + ",r=" + nonce
	authMessage := s.clientFirst + "," + string(serverFirst) + "," + withoutProof
	s.authMessageDbg = authMessage
	sig := mac(storedKey, authMessage)
	proof := make([]byte, len(clientKey))
	for i := range proof {
		proof[i] = clientKey[i] ^ sig[i]
	}
	s.serverSig = mac(mac(salted, "Server Key"), authMessage)
	return []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)), nil
}

// verify checks the server-final-message "v=<signature>".
func (s *scramClient) verify(serverFinal []byte) error {
	v, ok := bytes.CutPrefix(serverFinal, []byte("v="))
	if !ok {
		return fmt.Errorf("server-final %q has no v=", serverFinal)
	}
	got, err := base64.StdEncoding.DecodeString(string(v))
	if err != nil {
		return err
	}
	if !hmac.Equal(got, s.serverSig) {
		return fmt.Errorf("server signature mismatch")
	}
	return nil
}

// scramMechs returns vbcache's listed SCRAM mechanism names by hash, for
// either spelling (RFC 5802's SCRAM-SHA-256 or Couchbase's SCRAM-SHA256).
func scramMechs(t *testing.T, b *binConn) map[string][]string {
	st, v := b.call(opSASLList, nil, nil, nil)
	if st != stOK {
		t.Fatalf("list mechs: status 0x%04x %q", st, v)
	}
	t.Logf("mechanisms: %s", v)
	m := map[string][]string{}
	for _, mech := range strings.Fields(string(v)) {
		switch strings.ReplaceAll(mech, "SHA-", "SHA") {
		case "SCRAM-SHA1":
			m["1"] = append(m["1"], mech)
		case "SCRAM-SHA256":
			m["256"] = append(m["256"], mech)
		case "SCRAM-SHA512":
			m["512"] = append(m["512"], mech)
		}
	}
	return m
}

func startSASL(t *testing.T) *nodeproc.Node {
	if buildErr != nil {
		t.Fatalf("cannot build vbcache: %v", buildErr)
	}
	env := nodeproc.SASLEnv(t, "testuser", "testpass", false)
	return nodeproc.StartEnv(t, nodeproc.Vbcache, vbcacheBin, env, "-S", "-B", "binary")
}

func TestSCRAM(t *testing.T) {
	n := startSASL(t)
	mechs := scramMechs(t, dialBin(t, n.Addr))
	hashes := []struct {
		name string
		h    func() hash.Hash
	}{{"1", sha1.New}, {"256", sha256.New}, {"512", sha512.New}}
	for _, hc := range hashes {
		if len(mechs[hc.name]) == 0 {
			t.Errorf("SCRAM-SHA-%s is not listed", hc.name)
		}
		for _, mech := range mechs[hc.name] {
			t.Run(mech, func(t *testing.T) {
				exchange := func(pass string) (*binConn, uint16, []byte) {
					b := dialBin(t, n.Addr)
					s := newScram(hc.h, "testuser", pass)
					st, v := b.call(opSASLAuth, nil, []byte(mech), s.first())
					if st != stAuthCont {
						t.Fatalf("%s auth: status 0x%04x %q, want 0x0021 (continue)", mech, st, v)
					}
					fin, err := s.final(v)
					if err != nil {
						t.Fatalf("server-first %q: %v", v, err)
					}
					st, v = b.call(opSASLStep, nil, []byte(mech), fin)
					if st == stOK {
						if err := s.verify(v); err != nil {
							t.Errorf("%s: %v", mech, err)
						}
					}
					return b, st, v
				}

				t.Run("success", func(t *testing.T) {
					b, st, v := exchange("testpass")
					if st != stOK {
						t.Fatalf("step: status 0x%04x %q, want OK", st, v)
					}
					if st, v := b.call(opSet, make([]byte, 8), []byte("k"), []byte("v")); st != stOK {
						t.Fatalf("set after auth: 0x%04x %q", st, v)
					}
					if st, v := b.call(opGet, nil, []byte("k"), nil); st != stOK || string(v) != "v" {
						t.Fatalf("get after auth: 0x%04x %q", st, v)
					}
				})
				t.Run("wrong-password", func(t *testing.T) {
					b, st, v := exchange("nottestpass")
					if st != stAuthError {
						t.Fatalf("step with a wrong password: status 0x%04x %q, want 0x0020", st, v)
					}
					b.send(opGet, nil, []byte("k"), nil)
					if st, v, ok := b.recv(); ok && st != stAuthError {
						t.Fatalf("get after failed auth: status 0x%04x %q", st, v)
					}
				})
				t.Run("truncated", func(t *testing.T) {
					// the exchange stops after the server-first message: a
					// command must still be refused
					b := dialBin(t, n.Addr)
					s := newScram(hc.h, "testuser", "testpass")
					if st, v := b.call(opSASLAuth, nil, []byte(mech), s.first()); st != stAuthCont {
						t.Fatalf("auth: 0x%04x %q", st, v)
					}
					b.send(opGet, nil, []byte("k"), nil)
					if st, v, ok := b.recv(); ok && st != stAuthError {
						t.Fatalf("get in the middle of SCRAM: status 0x%04x %q", st, v)
					}
					// a truncated client-final message fails the step
					b = dialBin(t, n.Addr)
					s = newScram(hc.h, "testuser", "testpass")
					_, v := b.call(opSASLAuth, nil, []byte(mech), s.first())
					fin, err := s.final(v)
					if err != nil {
						t.Fatal(err)
					}
					if st, v := b.call(opSASLStep, nil, []byte(mech), fin[:len(fin)/2]); st != stAuthError {
						t.Fatalf("truncated client-final: status 0x%04x %q, want 0x0020", st, v)
					}
					// a garbled client-first message fails at once
					b = dialBin(t, n.Addr)
					if st, v := b.call(opSASLAuth, nil, []byte(mech), []byte("n,,n=testuser")); st != stAuthError {
						t.Fatalf("client-first without nonce: status 0x%04x %q, want 0x0020", st, v)
					}
				})
				t.Run("step-before-auth", func(t *testing.T) {
					b := dialBin(t, n.Addr)
					s := newScram(hc.h, "testuser", "testpass")
					if st, v := b.call(opSASLStep, nil, []byte(mech), s.first()); st != stAuthError {
						t.Fatalf("step before auth: status 0x%04x %q, want 0x0020", st, v)
					}
				})
				t.Run("unknown-user", func(t *testing.T) {
					b := dialBin(t, n.Addr)
					s := newScram(hc.h, "nobody", "testpass")
					st, v := b.call(opSASLAuth, nil, []byte(mech), s.first())
					if st == stAuthCont {
						// a server may hide unknown users until the proof
						fin, err := s.final(v)
						if err != nil {
							t.Fatal(err)
						}
						st, v = b.call(opSASLStep, nil, []byte(mech), fin)
					}
					if st != stAuthError {
						t.Fatalf("unknown user: status 0x%04x %q, want 0x0020", st, v)
					}
				})
			})
		}
	}
}
