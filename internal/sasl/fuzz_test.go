package sasl

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// FuzzSCRAM drives one SCRAM exchange with two arbitrary client messages.
// The server nonce and salt are fixed so the seeds, and the fuzzer's
// mutations of them, can reach the proof check. Properties:
//
//   - Step never panics, and every error wraps one of the sentinels;
//   - success happens only for user "user" and only when p= is the
//     ClientProof computed, independently of the server, from the password
//     "pencil" and the AuthMessage the two messages imply;
//   - after success or failure, Step returns ErrSequence.
func FuzzSCRAM(f *testing.F) {
	const snonce = "SERVERNONCE"
	salt := []byte("fixed salt 16 by")
	users := map[string]string{"user": "pencil", "a,b": "x"}
	a, err := NewAuthenticator(Config{Lookup: func(u string) (string, bool) {
		p, ok := users[u]
		return p, ok
	}})
	if err != nil {
		f.Fatal(err)
	}
	a.saltHook = func(string) []byte { return salt }
	a.nonceHook = func() string { return snonce }
	mechs := []string{"SCRAM-SHA-1", "SCRAM-SHA-256", "SCRAM-SHA-512"}

	// Seeds: valid exchanges for each hash, then a few broken ones.
	for i, mech := range mechs {
		h, _ := lookupMech(mech)
		for _, gs2 := range []string{"n,,", "y,,", "n,a=user,"} {
			c := newClient(h, "user", "pencil", "cnonce")
			c.gs2 = gs2
			first := c.first()
			fin, err := c.final([]byte("r=cnonce" + snonce + ",s=" + base64.StdEncoding.EncodeToString(salt) + ",i=4096"))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(i), first, fin)
		}
	}
	f.Add(uint8(0), []byte("n,,n=nobody,r=x"), []byte("c=biws,r=x"+snonce+",p=AAAAAAAAAAAAAAAAAAAAAAAAAAA="))
	f.Add(uint8(1), []byte("n,,n=a=2Cb,r=x"), []byte("c=biws,r=x,p="))
	f.Add(uint8(2), []byte(""), []byte("n,,n=user,r=x"))
	f.Add(uint8(0), []byte("p=tls-unique,,n=user,r=x"), []byte(""))

	f.Fuzz(func(t *testing.T, mi uint8, first, final []byte) {
		mech := mechs[int(mi)%len(mechs)]
		h, _ := lookupMech(mech)
		s, err := a.NewServer(mech)
		if err != nil {
			t.Fatal(err)
		}
		serverFirst, done, err := s.Step(first)
		checkErr(t, err)
		if done {
			t.Fatalf("done after first message %q", first)
		}
		if err != nil {
			assertDead(t, s)
			return
		}
		out, done, err := s.Step(final)
		checkErr(t, err)
		if err != nil {
			if s.User() != "" {
				t.Fatalf("User() = %q after failure", s.User())
			}
			assertDead(t, s)
			return
		}
		if !done {
			// Only possible if first was empty (initial response absent);
			// then serverFirst was empty and final was the real client-first.
			if len(first) != 0 || len(serverFirst) != 0 {
				t.Fatalf("continue after client-final: first %q final %q", first, final)
			}
			return
		}

		// Success: check it against an independent computation.
		if s.User() != "user" {
			t.Fatalf("authenticated as %q", s.User())
		}
		_, bare, _ := cutN(string(first), ",", 2) // skip the gs2 header
		i := strings.LastIndex(string(final), ",p=")
		if i < 0 {
			t.Fatalf("success without p=: %q", final)
		}
		authMsg := bare + "," + string(serverFirst) + "," + string(final[:i])
		salted, err := saltedPassword(h, "pencil", salt, 4096)
		if err != nil {
			t.Fatal(err)
		}
		want := base64.StdEncoding.EncodeToString(clientProof(h, salted, authMsg))
		if got := string(final[i+3:]); got != want {
			t.Fatalf("success with proof %q, want %q\nfirst %q\nfinal %q", got, want, first, final)
		}
		serverKey := testHMAC(h, salted, "Server Key")
		if wantV := "v=" + base64.StdEncoding.EncodeToString(testHMAC(h, serverKey, authMsg)); string(out) != wantV {
			t.Fatalf("server-final %q, want %q", out, wantV)
		}
		assertDead(t, s)
	})
}

// FuzzPlain checks PLAIN against an independent reading of RFC 4616:
// success exactly when the message is [authzid] NUL "user" NUL "pencil" with
// authzid empty or "user".
func FuzzPlain(f *testing.F) {
	a, err := NewAuthenticator(Config{Lookup: func(u string) (string, bool) {
		return "pencil", u == "user"
	}})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		"\x00user\x00pencil", "user\x00user\x00pencil", "x\x00user\x00pencil",
		"\x00user\x00pencil\x00", "\x00user\x00", "\x00\x00", "", "user",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		s, err := a.NewServer("PLAIN")
		if err != nil {
			t.Fatal(err)
		}
		out, done, err := s.Step(msg)
		checkErr(t, err)
		parts := bytes.Split(msg, []byte{0})
		want := len(parts) == 3 && string(parts[1]) == "user" && string(parts[2]) == "pencil" &&
			(len(parts[0]) == 0 || string(parts[0]) == "user")
		switch {
		case len(msg) == 0:
			if err != nil || done || out == nil || len(out) != 0 {
				t.Fatalf("empty message: (%q, %v, %v)", out, done, err)
			}
			return
		case want != done:
			t.Fatalf("message %q: done = %v, err = %v", msg, done, err)
		case done && (err != nil || s.User() != "user"):
			t.Fatalf("message %q: err %v user %q", msg, err, s.User())
		}
		assertDead(t, s)
	})
}

func checkErr(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, e := range []error{ErrAuthFailed, ErrMalformed, ErrSequence} {
		if errors.Is(err, e) {
			if !strings.HasPrefix(err.Error(), "sasl: ") {
				t.Fatalf("error without package prefix: %v", err)
			}
			return
		}
	}
	t.Fatalf("error wraps no sentinel: %v", err)
}

func assertDead(t *testing.T, s *Server) {
	t.Helper()
	user := s.User()
	if _, _, err := s.Step([]byte("n,,n=user,r=x")); !errors.Is(err, ErrSequence) {
		t.Fatalf("Step on finished Server: %v, want ErrSequence", err)
	}
	if s.User() != user {
		t.Fatalf("User changed from %q to %q", user, s.User())
	}
}

// cutN splits s after the n-th occurrence of sep.
func cutN(s, sep string, n int) (before, after string, ok bool) {
	i := 0
	for range n {
		j := strings.Index(s[i:], sep)
		if j < 0 {
			return s, "", false
		}
		i += j + len(sep)
	}
	return s[:i], s[i:], true
}
