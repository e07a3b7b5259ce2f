package sasl

import (
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
)

var testUsers = map[string]string{
	"user":     "pencil",
	"a,b=c":    "comma=equals",
	"unicodé":  "pässwörd",
	"colon":    "x:y",
	"longpass": strings.Repeat("p", 200),
}

func testLookup(u string) (string, bool) {
	p, ok := testUsers[u]
	return p, ok
}

// newTestAuth returns an Authenticator over testUsers.
func newTestAuth(t testing.TB) *Authenticator {
	t.Helper()
	a, err := NewAuthenticator(Config{Lookup: testLookup})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// goldenAuth returns an Authenticator whose salt and server nonce are fixed,
// for the RFC examples.
func goldenAuth(t testing.TB, saltB64, snonce string) *Authenticator {
	t.Helper()
	a := newTestAuth(t)
	salt, err := base64.StdEncoding.DecodeString(saltB64)
	if err != nil {
		t.Fatal(err)
	}
	a.saltHook = func(string) []byte { return salt }
	a.nonceHook = func() string { return snonce }
	return a
}

// TestGolden replays the example exchanges of RFC 5802 section 5 and RFC
// 7677 section 3 byte for byte.
func TestGolden(t *testing.T) {
	tests := []struct {
		name, mech, salt, snonce string
		clientFirst              string
		serverFirst              string
		clientFinal              string
		serverFinal              string
	}{
		{
			name:        "RFC5802/SCRAM-SHA-1",
			mech:        "SCRAM-SHA-1",
			salt:        "QSXCR+Q6sek8bf92",
			snonce:      "3rfcNHYJY1ZVvWVs7j",
			clientFirst: "n,," + /* gs2 header */ "n=user," + "r=fyko+d2lbbFgONRv9qkxdawL",
			serverFirst: "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j," + /* nonce */ "s=QSXCR+Q6sek8bf92," + /* salt */ "i=4096",
			clientFinal: "c=biws," + /* base64("n,,") */ "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j," + "p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
			serverFinal: "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
		},
		{
			name:        "RFC7677/SCRAM-SHA-256",
			mech:        "SCRAM-SHA-256",
			salt:        "W22ZaJ0SNY7soEsUEjb6gQ==",
			snonce:      "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
			clientFirst: "n,," + "n=user," + "r=rOprNGfwEbeRWgbNEkqO",
			serverFirst: "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0," + "s=W22ZaJ0SNY7soEsUEjb6gQ==," + "i=4096",
			clientFinal: "c=biws," + "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0," + "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
			serverFinal: "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := goldenAuth(t, tt.salt, tt.snonce)
			s, err := a.NewServer(tt.mech)
			if err != nil {
				t.Fatal(err)
			}
			out, done, err := s.Step([]byte(tt.clientFirst))
			if err != nil || done || string(out) != tt.serverFirst {
				t.Fatalf("client-first: got (%q, %v, %v), want (%q, false, nil)", out, done, err, tt.serverFirst)
			}
			out, done, err = s.Step([]byte(tt.clientFinal))
			if err != nil || !done || string(out) != tt.serverFinal {
				t.Fatalf("client-final: got (%q, %v, %v), want (%q, true, nil)", out, done, err, tt.serverFinal)
			}
			if s.User() != "user" {
				t.Errorf("User() = %q, want user", s.User())
			}

			// The test client must produce the same bytes.
			h, _ := lookupMech(tt.mech)
			c := newClient(h, "user", "pencil", strings.TrimPrefix(tt.clientFirst, "n,,n=user,r="))
			if got := string(c.first()); got != tt.clientFirst {
				t.Errorf("test client first = %q", got)
			}
			fin, err := c.final([]byte(tt.serverFirst))
			if err != nil || string(fin) != tt.clientFinal {
				t.Errorf("test client final = %q, %v", fin, err)
			}
			if err := c.verify([]byte(tt.serverFinal)); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestRoundTrip authenticates the test client against the server for every
// accepted mechanism name and a few awkward users.
func TestRoundTrip(t *testing.T) {
	a := newTestAuth(t)
	for _, mech := range strings.Fields(Mechanisms()) {
		if mech == "PLAIN" {
			continue
		}
		h, _ := lookupMech(mech)
		for user, pass := range testUsers {
			t.Run(mech+"/"+user, func(t *testing.T) {
				for range 2 { // second time from the key cache
					s, err := exchange(a, mech, newClient(h, user, pass, "clientnonce+/"))
					if err != nil {
						t.Fatal(err)
					}
					if s.User() != user || s.Mechanism() != mech {
						t.Fatalf("User, Mechanism = %q, %q", s.User(), s.Mechanism())
					}
					if _, _, err := s.Step(nil); !errors.Is(err, ErrSequence) {
						t.Fatalf("Step after success: %v, want ErrSequence", err)
					}
					if s.User() != user {
						t.Fatal("late Step cleared User")
					}
				}
			})
		}
	}
}

func TestWrongPasswordAndUnknownUser(t *testing.T) {
	a := newTestAuth(t)
	for _, mech := range []string{"SCRAM-SHA1", "SCRAM-SHA256", "SCRAM-SHA512"} {
		h, _ := lookupMech(mech)
		for _, tc := range []struct{ user, pass string }{
			{"user", "pencil2"},
			{"user", ""},
			{"nobody", "pencil"},
			{"User", "pencil"},
		} {
			s, err := exchange(a, mech, newClient(h, tc.user, tc.pass, "abc"))
			if !errors.Is(err, ErrAuthFailed) {
				t.Errorf("%s %q/%q: err = %v, want ErrAuthFailed", mech, tc.user, tc.pass, err)
			}
			if s.User() != "" {
				t.Errorf("User() = %q after failure", s.User())
			}
			if _, _, err := s.Step([]byte("c=biws,r=x,p=AAAA")); !errors.Is(err, ErrSequence) {
				t.Errorf("Step after failure: %v, want ErrSequence", err)
			}
		}
	}
}

// TestUnknownUserLooksKnown checks that an unknown user gets a server-first
// of the same shape as a known one, with a salt that is stable per name.
func TestUnknownUserLooksKnown(t *testing.T) {
	a := newTestAuth(t)
	first := func(user string) []string {
		s, _ := a.NewServer("SCRAM-SHA256")
		out, done, err := s.Step([]byte("n,,n=" + user + ",r=abc"))
		if err != nil || done {
			t.Fatalf("%s: %v %v", user, done, err)
		}
		return strings.Split(string(out), ",")
	}
	known, unknown, unknown2 := first("user"), first("nobody"), first("nobody")
	if len(known) != 3 || len(unknown) != 3 {
		t.Fatalf("server-first: %q, %q", known, unknown)
	}
	if len(known[0]) != len(unknown[0]) || len(known[1]) != len(unknown[1]) || known[2] != unknown[2] {
		t.Errorf("shapes differ: %q vs %q", known, unknown)
	}
	if unknown[1] != unknown2[1] {
		t.Errorf("unknown user's salt changed: %q, %q", unknown[1], unknown2[1])
	}
	if unknown[0] == unknown2[0] {
		t.Errorf("server nonce repeated: %q", unknown[0])
	}
	if known[1] == unknown[1] {
		t.Errorf("two users share a salt")
	}
}

func TestUnknownMechanism(t *testing.T) {
	a := newTestAuth(t)
	for _, m := range []string{"", "CRAM-MD5", "scram-sha-256", "SCRAM-SHA-256-PLUS", "SCRAM-SHA384", "PLAIN "} {
		if _, err := a.NewServer(m); !errors.Is(err, ErrUnknownMechanism) {
			t.Errorf("NewServer(%q): %v, want ErrUnknownMechanism", m, err)
		}
	}
}

func TestConfig(t *testing.T) {
	if _, err := NewAuthenticator(Config{}); err == nil {
		t.Error("nil Lookup accepted")
	}
	if _, err := NewAuthenticator(Config{Lookup: testLookup, Iterations: -1}); err == nil {
		t.Error("negative Iterations accepted")
	}
	if _, err := NewAuthenticator(Config{Lookup: testLookup, Rand: strings.NewReader("short")}); err == nil {
		t.Error("short Rand accepted")
	}
	a, err := NewAuthenticator(Config{Lookup: testLookup, Iterations: 5000})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := a.NewServer("SCRAM-SHA1")
	out, _, _ := s.Step([]byte("n,,n=user,r=x"))
	if !strings.HasSuffix(string(out), ",i=5000") {
		t.Errorf("server-first %q does not carry i=5000", out)
	}
	if _, err := exchange(a, "SCRAM-SHA1", newClient(hashSHA1, "user", "pencil", "x")); err != nil {
		t.Error(err)
	}
}

// TestPasswordChange checks that the key cache notices a new password.
func TestPasswordChange(t *testing.T) {
	var mu sync.Mutex
	pw := "old"
	a, err := NewAuthenticator(Config{Lookup: func(u string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		return pw, u == "u"
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exchange(a, "SCRAM-SHA-1", newClient(hashSHA1, "u", "old", "n")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	pw = "new"
	mu.Unlock()
	if _, err := exchange(a, "SCRAM-SHA-1", newClient(hashSHA1, "u", "old", "n")); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("old password after change: %v", err)
	}
	if _, err := exchange(a, "SCRAM-SHA-1", newClient(hashSHA1, "u", "new", "n")); err != nil {
		t.Fatal(err)
	}
}

// TestPreviousPassword is a rotation: while Config.Previous has the old
// password, both it and the new one log in over SCRAM (with the server's
// signature each client verifies) and PLAIN; a third does not, nor does
// the old one once Previous forgets it, nor any for an unknown user.
func TestPreviousPassword(t *testing.T) {
	var mu sync.Mutex
	prev := "old"
	a, err := NewAuthenticator(Config{
		Lookup: func(u string) (string, bool) { return "new", u == "u" },
		Previous: func(u string) (string, bool) {
			mu.Lock()
			defer mu.Unlock()
			return prev, prev != ""
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	plain := func(user, pw string) error {
		s, _ := a.NewServer("PLAIN")
		_, _, err := s.Step([]byte("\x00" + user + "\x00" + pw))
		return err
	}
	for _, pw := range []string{"new", "old"} {
		for range 2 { // the second from the key cache
			if _, err := exchange(a, "SCRAM-SHA-256", newClient(hashSHA256, "u", pw, "n")); err != nil {
				t.Fatalf("SCRAM with %q during the rotation: %v", pw, err)
			}
		}
		if err := plain("u", pw); err != nil {
			t.Fatalf("PLAIN with %q during the rotation: %v", pw, err)
		}
	}
	if _, err := exchange(a, "SCRAM-SHA-256", newClient(hashSHA256, "u", "other", "n")); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("a third password: %v", err)
	}
	if err := plain("u", "other"); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("a third password over PLAIN: %v", err)
	}
	if _, err := exchange(a, "SCRAM-SHA-256", newClient(hashSHA256, "x", "old", "n")); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("an unknown user with the previous password: %v", err)
	}
	mu.Lock()
	prev = ""
	mu.Unlock()
	if _, err := exchange(a, "SCRAM-SHA-256", newClient(hashSHA256, "u", "old", "n")); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("old password after the rotation: %v", err)
	}
	if err := plain("u", "old"); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("old password over PLAIN after the rotation: %v", err)
	}
	if _, err := exchange(a, "SCRAM-SHA-256", newClient(hashSHA256, "u", "new", "n")); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrent runs exchanges in parallel against one Authenticator, for
// the race detector.
func TestConcurrent(t *testing.T) {
	a := newTestAuth(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			mech := []string{"SCRAM-SHA1", "SCRAM-SHA256", "SCRAM-SHA512"}[i%3]
			h, _ := lookupMech(mech)
			if _, err := exchange(a, mech, newClient(h, "user", "pencil", "c")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// TestSCRAMMalformed feeds bad client messages. Each case names the first
// message (client-first) and, if that one is valid, the second; the server
// nonce is "SN" and the salt fixed, so cases can spell out the right nonce.
func TestSCRAMMalformed(t *testing.T) {
	const okFirst = "n,,n=user,r=CN"
	const okWithoutProof = "c=biws,r=CNSN"
	okProof := func() string {
		a := goldenAuth(t, "QSXCR+Q6sek8bf92", "SN")
		c := newClient(hashSHA256, "user", "pencil", "CN")
		c.first()
		s, _ := a.NewServer("SCRAM-SHA-256")
		out, _, _ := s.Step([]byte(okFirst))
		fin, err := c.final(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(fin[len(okWithoutProof):])
	}()
	tests := []struct {
		name   string
		first  string
		final  string // "" means the first message is expected to fail
		target error
	}{
		{"first/garbage", "hello", "", ErrMalformed},
		{"first/no-gs2", "n=user,r=CN", "", ErrMalformed},
		{"first/channel-binding", "p=tls-unique,,n=user,r=CN", "", ErrAuthFailed},
		{"first/bad-cbflag", "x,,n=user,r=CN", "", ErrMalformed},
		{"first/unterminated-gs2", "n,", "", ErrMalformed},
		{"first/bad-authzid", "n,b=user,n=user,r=CN", "", ErrMalformed},
		{"first/other-authzid", "n,a=admin,n=user,r=CN", "", ErrAuthFailed},
		{"first/mext", "n,,m=ext,n=user,r=CN", "", ErrMalformed},
		{"first/no-user", "n,,r=CN", "", ErrMalformed},
		{"first/empty-user", "n,,n=,r=CN", "", ErrMalformed},
		{"first/no-nonce", "n,,n=user", "", ErrMalformed},
		{"first/empty-nonce", "n,,n=user,r=", "", ErrMalformed},
		{"first/nonce-space", "n,,n=user,r=a b", "", ErrMalformed},
		{"first/order", "n,,r=CN,n=user", "", ErrMalformed},
		{"first/bad-escape", "n,,n=us=2Xer,r=CN", "", ErrMalformed},
		{"first/trailing-equals", "n,,n=user=,r=CN", "", ErrMalformed},
		{"first/nul", "n,,n=us\x00er,r=CN", "", ErrMalformed},
		{"first/not-utf8", "n,,n=\xff,r=CN", "", ErrMalformed},
		{"first/bad-ext", "n,,n=user,r=CN,xx", "", ErrMalformed},
		{"first/too-long", "n,,n=user,r=" + strings.Repeat("a", MaxMessageLen), "", ErrMalformed},

		{"final/garbage", okFirst, "hello", ErrMalformed},
		{"final/empty", okFirst, " ", ErrMalformed},
		{"final/no-proof", okFirst, okWithoutProof, ErrMalformed},
		{"final/proof-only", okFirst, "p=" + okProof[3:], ErrMalformed},
		{"final/no-cbind", okFirst, "r=CNSN" + okProof, ErrMalformed},
		{"final/no-nonce", okFirst, "c=biws" + okProof, ErrMalformed},
		{"final/swapped", okFirst, "r=CNSN,c=biws" + okProof, ErrMalformed},
		{"final/bad-base64-cbind", okFirst, "c=bi!s,r=CNSN" + okProof, ErrMalformed},
		{"final/bad-base64-proof", okFirst, okWithoutProof + ",p=***", ErrMalformed},
		{"final/proof-short", okFirst, okWithoutProof + ",p=AAAA", ErrMalformed},
		{"final/proof-not-last", okFirst, okWithoutProof + okProof + ",x=1", ErrMalformed},
		{"final/bad-ext", okFirst, okWithoutProof + ",zz" + okProof, ErrMalformed},
		{"final/wrong-cbind", okFirst, "c=eSws,r=CNSN" + okProof, ErrAuthFailed},
		{"final/wrong-nonce", okFirst, "c=biws,r=CNXX" + okProof, ErrAuthFailed},
		{"final/client-nonce-only", okFirst, "c=biws,r=CN" + okProof, ErrAuthFailed},
		{"final/wrong-proof", okFirst, okWithoutProof + ",p=" + base64.StdEncoding.EncodeToString(make([]byte, 32)), ErrAuthFailed},
		{"final/ext-changes-authmsg", okFirst, okWithoutProof + ",x=1" + okProof, ErrAuthFailed},
		{"final/nul", okFirst, "c=biws,r=CNSN\x00" + okProof, ErrMalformed},
		{"final/replayed-first", okFirst, okFirst, ErrMalformed},
	}
	a := goldenAuth(t, "QSXCR+Q6sek8bf92", "SN")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := a.NewServer("SCRAM-SHA-256")
			if err != nil {
				t.Fatal(err)
			}
			_, done, err := s.Step([]byte(tt.first))
			if tt.final == "" {
				if !errors.Is(err, tt.target) || done {
					t.Fatalf("client-first: done=%v err=%v, want %v", done, err, tt.target)
				}
				return
			}
			if err != nil {
				t.Fatalf("client-first: %v", err)
			}
			_, done, err = s.Step([]byte(tt.final))
			if !errors.Is(err, tt.target) || done {
				t.Fatalf("client-final: done=%v err=%v, want %v", done, err, tt.target)
			}
		})
	}

	// And the unmodified pair does succeed, so the cases above fail for
	// the reason they name.
	s, _ := a.NewServer("SCRAM-SHA-256")
	if _, _, err := s.Step([]byte(okFirst)); err != nil {
		t.Fatal(err)
	}
	if _, done, err := s.Step([]byte(okWithoutProof + okProof)); !done || err != nil {
		t.Fatalf("control exchange: %v %v", done, err)
	}
}

// TestSCRAMSequence covers messages in the wrong place: an empty initial
// response, extra steps, and a replayed client-final on a new exchange.
func TestSCRAMSequence(t *testing.T) {
	a := newTestAuth(t)

	// Empty initial response: empty challenge, then the real client-first.
	s, _ := a.NewServer("SCRAM-SHA-1")
	out, done, err := s.Step(nil)
	if err != nil || done || out == nil || len(out) != 0 {
		t.Fatalf("empty initial response: (%q, %v, %v)", out, done, err)
	}
	c := newClient(hashSHA1, "user", "pencil", "abc")
	out, _, err = s.Step(c.first())
	if err != nil {
		t.Fatal(err)
	}
	fin, _ := c.final(out)
	out, done, err = s.Step(fin)
	if err != nil || !done || c.verify(out) != nil {
		t.Fatalf("after empty initial response: %v %v", done, err)
	}

	// Two empty messages in a row.
	s, _ = a.NewServer("SCRAM-SHA-1")
	s.Step(nil)
	if _, _, err := s.Step(nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("second empty message: %v", err)
	}

	// Empty client-final.
	s, _ = a.NewServer("SCRAM-SHA-1")
	s.Step(newClient(hashSHA1, "user", "pencil", "abc").first())
	if _, _, err := s.Step(nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("empty client-final: %v", err)
	}

	// Replaying a whole successful client-final on a new exchange fails:
	// the server nonce is fresh.
	c = newClient(hashSHA256, "user", "pencil", "abc")
	s, _ = a.NewServer("SCRAM-SHA256")
	out, _, _ = s.Step(c.first())
	fin, _ = c.final(out)
	if _, done, err := s.Step(fin); !done || err != nil {
		t.Fatal(err)
	}
	s2, _ := a.NewServer("SCRAM-SHA256")
	s2.Step(c.first())
	if _, _, err := s2.Step(fin); !errors.Is(err, ErrAuthFailed) {
		t.Errorf("replayed client-final: %v, want ErrAuthFailed", err)
	}
}

// TestGS2Variants accepts "y,," and a matching authzid, and checks that c=
// must carry exactly the gs2 header that was sent.
func TestGS2Variants(t *testing.T) {
	a := newTestAuth(t)
	for _, gs2 := range []string{"y,,", "n,a=user,", "y,a=user,"} {
		c := newClient(hashSHA512, "user", "pencil", "nonce")
		c.gs2 = gs2
		if _, err := exchange(a, "SCRAM-SHA-512", c); err != nil {
			t.Errorf("gs2 %q: %v", gs2, err)
		}
	}
	// Escaped authzid equal to the escaped user name.
	c := newClient(hashSHA512, "a,b=c", "comma=equals", "nonce")
	c.gs2 = "n,a=a=2Cb=3Dc,"
	if _, err := exchange(a, "SCRAM-SHA-512", c); err != nil {
		t.Errorf("escaped authzid: %v", err)
	}
}
